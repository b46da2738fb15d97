/* model.c - config.json of a model: parsing and validation (SPEC.md). */
#include "backends/model.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "common/httpc.h"

const char *model_backend_name(enum model_backend b)
{
    switch (b) {
    case MODEL_BACKEND_AUTO: return "auto";
    case MODEL_BACKEND_CPU: return "cpu";
    case MODEL_BACKEND_CUDA: return "cuda";
    case MODEL_BACKEND_SYNTHETIC: return "synthetic";
    case MODEL_BACKEND_UPSTREAM: return "upstream";
    }
    return "?";
}

/* Field paths in messages look like "models/x/config.json: batching.max_batch_size: ...". */

static int check_keys(json_t *obj, const char *const *allowed, const char *path,
                      const char *where, struct error *err)
{
    const char *key;
    json_t *v;
    json_object_foreach(obj, key, v) {
        int ok = 0;
        for (const char *const *a = allowed; *a; a++)
            if (strcmp(key, *a) == 0)
                ok = 1;
        if (!ok)
            return error_set(err, BG_ECONFIG, "%s: %s%s: unknown field", path, where, key);
    }
    return 0;
}

static int get_int(json_t *obj, const char *key, int64_t lo, int64_t hi, int64_t *out,
                   const char *path, const char *where, struct error *err)
{
    json_t *v = json_object_get(obj, key);
    if (!v)
        return 0;
    if (!json_is_integer(v))
        return error_set(err, BG_ECONFIG, "%s: %s%s: must be an integer", path, where, key);
    int64_t x = json_integer_value(v);
    if (x < lo || x > hi)
        return error_set(err, BG_ECONFIG, "%s: %s%s: %lld is out of range %lld..%lld", path,
                         where, key, (long long)x, (long long)lo, (long long)hi);
    *out = x;
    return 0;
}

static int get_str(json_t *obj, const char *key, char *dst, size_t cap, bool required,
                   const char *path, const char *where, struct error *err)
{
    json_t *v = json_object_get(obj, key);
    if (!v) {
        if (required)
            return error_set(err, BG_ECONFIG, "%s: %s%s: missing", path, where, key);
        return 0;
    }
    if (!json_is_string(v) || json_string_length(v) == 0)
        return error_set(err, BG_ECONFIG, "%s: %s%s: must be a non-empty string", path, where,
                         key);
    if (json_string_length(v) >= cap)
        return error_set(err, BG_ECONFIG, "%s: %s%s: longer than %zu bytes", path, where, key,
                         cap - 1);
    snprintf(dst, cap, "%s", json_string_value(v));
    return 0;
}

static int parse_tensor(json_t *arr, const char *field, struct model_tensor *t, const char *path,
                        struct error *err)
{
    if (!json_is_array(arr) || json_array_size(arr) == 0)
        return error_set(err, BG_ECONFIG, "%s: %s: must be a non-empty array", path, field);
    if (json_array_size(arr) != 1)
        return error_set(err, BG_ECONFIG,
                         "%s: %s: exactly one tensor is supported by the cpu, cuda and synthetic "
                         "backends (got %zu)", path, field, json_array_size(arr));
    json_t *o = json_array_get(arr, 0);
    char where[64];
    snprintf(where, sizeof where, "%s[0].", field);
    if (!json_is_object(o))
        return error_set(err, BG_ECONFIG, "%s: %s[0]: must be an object", path, field);
    static const char *const keys[] = {"name", "datatype", "shape", NULL};
    int rc;
    if ((rc = check_keys(o, keys, path, where, err)) ||
        (rc = get_str(o, "name", t->name, sizeof t->name, true, path, where, err)))
        return rc;
    snprintf(t->datatype, sizeof t->datatype, "FP32");
    if ((rc = get_str(o, "datatype", t->datatype, sizeof t->datatype, false, path, where, err)))
        return rc;
    if (strcmp(t->datatype, "FP32") != 0)
        return error_set(err, BG_ECONFIG, "%s: %sdatatype: \"%s\" is not supported (FP32 only)",
                         path, where, t->datatype);
    json_t *shape = json_object_get(o, "shape");
    if (!json_is_array(shape) || json_array_size(shape) == 0 ||
        json_array_size(shape) > MODEL_MAX_DIMS)
        return error_set(err, BG_ECONFIG,
                         "%s: %sshape: must be an array of 1..%d positive integers (per row, "
                         "without the batch dimension)", path, where, MODEL_MAX_DIMS);
    t->ndims = (int)json_array_size(shape);
    t->row_elems = 1;
    for (int i = 0; i < t->ndims; i++) {
        json_t *d = json_array_get(shape, (size_t)i);
        if (!json_is_integer(d) || json_integer_value(d) < 1 || json_integer_value(d) > (1 << 24))
            return error_set(err, BG_ECONFIG,
                             "%s: %sshape[%d]: must be a positive integer (per-row shape; the "
                             "batch dimension is implicit)", path, where, i);
        t->shape[i] = json_integer_value(d);
        t->row_elems *= t->shape[i];
        if (t->row_elems > (1 << 24))
            return error_set(err, BG_ECONFIG, "%s: %sshape: more than %d elements per row", path,
                             where, 1 << 24);
    }
    return 0;
}

static int parse_layers(json_t *arr, struct model_config *c, const char *path, struct error *err)
{
    if (!json_is_array(arr))
        return error_set(err, BG_ECONFIG, "%s: layers: must be an array", path);
    if (json_array_size(arr) > MODEL_MAX_LAYERS)
        return error_set(err, BG_ECONFIG, "%s: layers: more than %d layers", path,
                         MODEL_MAX_LAYERS);
    size_t i;
    json_t *l;
    json_array_foreach(arr, i, l) {
        char where[32];
        snprintf(where, sizeof where, "layers[%zu].", i);
        struct model_layer *ly = &c->layers[i];
        memset(ly, 0, sizeof *ly);
        if (!json_is_object(l))
            return error_set(err, BG_ECONFIG, "%s: layers[%zu]: must be an object", path, i);
        char type[32] = "";
        int rc;
        if ((rc = get_str(l, "type", type, sizeof type, true, path, where, err)))
            return rc;
        if (strcmp(type, "dense") == 0) {
            static const char *const keys[] = {"type", "weight", "bias", "activation", NULL};
            char act[32] = "none";
            ly->type = MODEL_LAYER_DENSE;
            if ((rc = check_keys(l, keys, path, where, err)) ||
                (rc = get_str(l, "weight", ly->weight, sizeof ly->weight, true, path, where, err)) ||
                (rc = get_str(l, "bias", ly->bias, sizeof ly->bias, false, path, where, err)) ||
                (rc = get_str(l, "activation", act, sizeof act, false, path, where, err)))
                return rc;
            if (dense_act_parse(act, &ly->act) < 0)
                return error_set(err, BG_ECONFIG,
                                 "%s: %sactivation: \"%s\" is not one of relu, gelu, tanh, "
                                 "sigmoid, none", path, where, act);
        } else if (strcmp(type, "softmax") == 0) {
            static const char *const keys[] = {"type", NULL};
            ly->type = MODEL_LAYER_SOFTMAX;
            if ((rc = check_keys(l, keys, path, where, err)))
                return rc;
        } else {
            return error_set(err, BG_ECONFIG, "%s: %stype: \"%s\" is not one of dense, softmax",
                             path, where, type);
        }
    }
    c->nlayers = (int)json_array_size(arr);
    return 0;
}

static int parse_batching(json_t *o, struct model_batching *b, const char *path, struct error *err)
{
    static const char *const keys[] = {"max_batch_size", "preferred_batch_sizes",
                                       "max_queue_delay_us", "latency_budget_ms",
                                       "max_queue_size", "default_priority",
                                       "priority_aging_ms", "policy", "batch_timeout_ms",
                                       NULL};
    if (!json_is_object(o))
        return error_set(err, BG_ECONFIG, "%s: batching: must be an object", path);
    int rc;
    int64_t x;
    if ((rc = check_keys(o, keys, path, "batching.", err)))
        return rc;
    x = b->max_batch_size;
    if ((rc = get_int(o, "max_batch_size", 1, 65536, &x, path, "batching.", err)))
        return rc;
    b->max_batch_size = (int)x;
    if ((rc = get_int(o, "max_queue_delay_us", 0, 60000000, &b->max_queue_delay_us, path,
                      "batching.", err)) ||
        (rc = get_int(o, "latency_budget_ms", 0, 3600000, &b->latency_budget_ms, path,
                      "batching.", err)))
        return rc;
    x = b->max_queue_size;
    if ((rc = get_int(o, "max_queue_size", 1, 1 << 24, &x, path, "batching.", err)))
        return rc;
    b->max_queue_size = (int)x;
    x = b->default_priority;
    if ((rc = get_int(o, "default_priority", 1, 1000000, &x, path, "batching.", err)))
        return rc;
    b->default_priority = (int)x;
    if ((rc = get_int(o, "priority_aging_ms", 0, 3600000, &b->priority_aging_ms, path,
                      "batching.", err)) ||
        (rc = get_int(o, "batch_timeout_ms", 0, 3600000, &b->batch_timeout_ms, path,
                      "batching.", err)) ||
        (rc = get_str(o, "policy", b->policy, sizeof b->policy, false, path, "batching.", err)))
        return rc;
    if (strcmp(b->policy, "deadline") != 0 && strcmp(b->policy, "fixed_delay") != 0)
        return error_set(err, BG_ECONFIG,
                         "%s: batching.policy: \"%s\" is not deadline or fixed_delay", path,
                         b->policy);
    json_t *pref = json_object_get(o, "preferred_batch_sizes");
    if (pref) {
        if (!json_is_array(pref) || json_array_size(pref) > MODEL_MAX_PREFERRED)
            return error_set(err, BG_ECONFIG,
                             "%s: batching.preferred_batch_sizes: must be an array of at most %d "
                             "sizes", path, MODEL_MAX_PREFERRED);
        size_t i;
        json_t *v;
        json_array_foreach(pref, i, v) {
            if (!json_is_integer(v) || json_integer_value(v) < 1 ||
                json_integer_value(v) > b->max_batch_size)
                return error_set(err, BG_ECONFIG,
                                 "%s: batching.preferred_batch_sizes[%zu]: must be an integer in "
                                 "1..max_batch_size (%d)", path, i, b->max_batch_size);
            b->preferred[i] = (int)json_integer_value(v);
        }
        b->npreferred = (int)json_array_size(pref);
    }
    return 0;
}

static int parse_instances(json_t *o, struct model_config *c, const char *path, struct error *err)
{
    static const char *const keys[] = {"count", "devices", NULL};
    if (!json_is_object(o))
        return error_set(err, BG_ECONFIG, "%s: instances: must be an object", path);
    int rc;
    int64_t x = c->instance_count;
    if ((rc = check_keys(o, keys, path, "instances.", err)) ||
        (rc = get_int(o, "count", 1, 256, &x, path, "instances.", err)))
        return rc;
    c->instance_count = (int)x;
    json_t *dev = json_object_get(o, "devices");
    if (dev) {
        if (!json_is_array(dev) || json_array_size(dev) > MODEL_MAX_DEVICES)
            return error_set(err, BG_ECONFIG,
                             "%s: instances.devices: must be an array of at most %d device "
                             "indices", path, MODEL_MAX_DEVICES);
        size_t i;
        json_t *v;
        json_array_foreach(dev, i, v) {
            if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 255)
                return error_set(err, BG_ECONFIG,
                                 "%s: instances.devices[%zu]: must be a device index 0..255",
                                 path, i);
            c->devices[i] = (int)json_integer_value(v);
        }
        c->ndevices = (int)json_array_size(dev);
    }
    return 0;
}

static int parse_synthetic(json_t *o, struct model_config *c, const char *path, struct error *err)
{
    static const char *const keys[] = {"base_us", "per_row_us", "mode", NULL};
    if (!json_is_object(o))
        return error_set(err, BG_ECONFIG, "%s: synthetic: must be an object", path);
    int rc;
    char mode[16] = "sleep";
    if ((rc = check_keys(o, keys, path, "synthetic.", err)) ||
        (rc = get_int(o, "base_us", 0, 60000000, &c->synthetic.base_us, path, "synthetic.", err)) ||
        (rc = get_int(o, "per_row_us", 0, 60000000, &c->synthetic.per_row_us, path, "synthetic.",
                      err)) ||
        (rc = get_str(o, "mode", mode, sizeof mode, false, path, "synthetic.", err)))
        return rc;
    if (strcmp(mode, "sleep") == 0)
        c->synthetic.mode = SYNTHETIC_SLEEP;
    else if (strcmp(mode, "spin") == 0)
        c->synthetic.mode = SYNTHETIC_SPIN;
    else
        return error_set(err, BG_ECONFIG, "%s: synthetic.mode: \"%s\" is not sleep or spin", path,
                         mode);
    return 0;
}

static int parse_upstream(json_t *o, struct model_config *c, const char *path, struct error *err)
{
    static const char *const keys[] = {"urls",       "protocol",          "model",
                                       "max_inflight", "timeout_ms",      "health_path",
                                       "health_interval_ms", "idempotent", NULL};
    struct model_upstream *u = &c->upstream;
    if (!json_is_object(o))
        return error_set(err, BG_ECONFIG, "%s: upstream: the upstream backend needs an object "
                                          "with urls", path);
    int rc;
    if ((rc = check_keys(o, keys, path, "upstream.", err)))
        return rc;
    json_t *urls = json_object_get(o, "urls");
    if (!json_is_array(urls) || json_array_size(urls) == 0 ||
        json_array_size(urls) > MODEL_MAX_UPSTREAMS)
        return error_set(err, BG_ECONFIG, "%s: upstream.urls: 1 to %d URLs like "
                                          "\"http://host:port\"", path, MODEL_MAX_UPSTREAMS);
    size_t i;
    json_t *v;
    json_array_foreach(urls, i, v) {
        const char *s = json_string_value(v), *rest = NULL;
        if (httpc_url_parse(s, u->hosts[i], sizeof u->hosts[i], &u->ports[i], &rest) < 0 ||
            (rest && strcmp(rest, "/") != 0))
            return error_set(err, BG_ECONFIG, "%s: upstream.urls[%zu]: \"%s\" is not "
                                              "http://HOST:PORT", path, i, s ? s : "?");
    }
    u->nurls = (int)json_array_size(urls);
    char proto[32] = "kserve_v2";
    if ((rc = get_str(o, "protocol", proto, sizeof proto, false, path, "upstream.", err)) ||
        (rc = get_str(o, "model", u->model, sizeof u->model, false, path, "upstream.", err)))
        return rc;
    if (strcmp(proto, "kserve_v2") == 0)
        u->protocol = UPSTREAM_KSERVE_V2;
    else if (strcmp(proto, "tfserving") == 0)
        u->protocol = UPSTREAM_TFSERVING;
    else
        return error_set(err, BG_ECONFIG, "%s: upstream.protocol: \"%s\" is not kserve_v2 or "
                                          "tfserving", path, proto);
    if (!u->model[0])
        snprintf(u->model, sizeof u->model, "%s", c->name);
    int64_t x = 4;
    if ((rc = get_int(o, "max_inflight", 1, 4096, &x, path, "upstream.", err)))
        return rc;
    u->max_inflight = (int)x;
    x = 10000;
    if ((rc = get_int(o, "timeout_ms", 1, 3600000, &x, path, "upstream.", err)))
        return rc;
    u->timeout_ms = (int)x;
    /* The protocol's own readiness endpoint unless told otherwise. */
    if (u->protocol == UPSTREAM_KSERVE_V2)
        snprintf(u->health_path, sizeof u->health_path, "/v2/health/ready");
    else
        snprintf(u->health_path, sizeof u->health_path, "/v1/models/%s", u->model);
    if ((rc = get_str(o, "health_path", u->health_path, sizeof u->health_path, false, path,
                      "upstream.", err)))
        return rc;
    if (u->health_path[0] != '/')
        return error_set(err, BG_ECONFIG, "%s: upstream.health_path: \"%s\" must start with /",
                         path, u->health_path);
    x = 2000;
    if ((rc = get_int(o, "health_interval_ms", 0, 3600000, &x, path, "upstream.", err)))
        return rc;
    u->health_interval_ms = (int)x;
    /* upstream.idempotent (bool, default true): inference is a pure function,
     * so a call lost with a reused connection is sent again (common/upcall.h);
     * false for a server whose answers have side effects. */
    json_t *idem = json_object_get(o, "idempotent");
    if (idem && !json_is_boolean(idem))
        return error_set(err, BG_ECONFIG, "%s: upstream.idempotent: must be true or false", path);
    u->idempotent = !idem || json_is_true(idem);
    return 0;
}

static bool name_is_safe(const char *s)
{
    /* Names appear in URLs and metric labels: keep them to a portable set. */
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
              *s == '_' || *s == '-' || *s == '.'))
            return false;
    return true;
}

static void config_defaults(struct model_config *c)
{
    memset(c, 0, sizeof *c);
    c->backend = MODEL_BACKEND_AUTO;
    c->batching.max_batch_size = 64;
    c->batching.max_queue_delay_us = 1000;
    c->batching.latency_budget_ms = 0;
    c->batching.max_queue_size = 4096;
    c->batching.batch_timeout_ms = 30000;
    c->batching.default_priority = 1;
    c->batching.priority_aging_ms = 1000;
    snprintf(c->batching.policy, sizeof c->batching.policy, "deadline");
    c->instance_count = 1;
    c->synthetic.base_us = 2000;
    c->synthetic.per_row_us = 20;
    c->synthetic.mode = SYNTHETIC_SLEEP;
}

int model_config_parse(const char *json, size_t len, const char *path, const char *dir_name,
                       struct model_config *c, struct error *err)
{
    config_defaults(c);
    snprintf(c->config_path, sizeof c->config_path, "%s", path);
    json_error_t jerr;
    json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return error_set(err, BG_ECONFIG, "%s: line %d, column %d: invalid JSON: %s", path,
                         jerr.line, jerr.column, jerr.text);
    int rc = 0;
    static const char *const keys[] = {"name",     "backend",   "inputs",    "outputs",
                                       "layers",   "batching",  "instances", "synthetic",
                                       "upstream", "platform",  NULL};
    char backend[16] = "auto";
    if (!json_is_object(root)) {
        rc = error_set(err, BG_ECONFIG, "%s: the top level must be a JSON object", path);
        goto out;
    }
    if ((rc = check_keys(root, keys, path, "", err)) ||
        (rc = get_str(root, "name", c->name, sizeof c->name, dir_name == NULL, path, "", err)) ||
        (rc = get_str(root, "backend", backend, sizeof backend, false, path, "", err)))
        goto out;
    if (!c->name[0])
        snprintf(c->name, sizeof c->name, "%s", dir_name);
    if (dir_name && strcmp(c->name, dir_name) != 0) {
        rc = error_set(err, BG_ECONFIG, "%s: name: \"%s\" differs from its folder \"%s\"", path,
                       c->name, dir_name);
        goto out;
    }
    if (!name_is_safe(c->name)) {
        rc = error_set(err, BG_ECONFIG, "%s: name: \"%s\" may use only letters, digits, _ - .",
                       path, c->name);
        goto out;
    }
    static const char *const backends[] = {"auto", "cpu", "cuda", "synthetic", "upstream"};
    int b = -1;
    for (int i = 0; i < 5; i++)
        if (strcmp(backend, backends[i]) == 0)
            b = i;
    if (b < 0) {
        rc = error_set(err, BG_ECONFIG,
                       "%s: backend: \"%s\" is not one of auto, cpu, cuda, synthetic, upstream",
                       path, backend);
        goto out;
    }
    c->backend = (enum model_backend)b;
    if ((rc = parse_tensor(json_object_get(root, "inputs"), "inputs", &c->input, path, err)) ||
        (rc = parse_tensor(json_object_get(root, "outputs"), "outputs", &c->output, path, err)))
        goto out;
    json_t *v;
    if ((v = json_object_get(root, "batching")) && (rc = parse_batching(v, &c->batching, path, err)))
        goto out;
    if ((v = json_object_get(root, "instances")) && (rc = parse_instances(v, c, path, err)))
        goto out;
    if ((v = json_object_get(root, "synthetic")) && (rc = parse_synthetic(v, c, path, err)))
        goto out;
    v = json_object_get(root, "layers");
    if (c->backend == MODEL_BACKEND_UPSTREAM &&
        (rc = parse_upstream(json_object_get(root, "upstream"), c, path, err)))
        goto out;
    if (c->backend == MODEL_BACKEND_SYNTHETIC || c->backend == MODEL_BACKEND_UPSTREAM) {
        if (v && json_array_size(v) > 0) {
            rc = error_set(err, BG_ECONFIG, "%s: layers: the %s backend takes no layers", path,
                           backend);
            goto out;
        }
    } else {
        if (!v || !json_is_array(v) || json_array_size(v) == 0) {
            rc = error_set(err, BG_ECONFIG, "%s: layers: the %s backend needs at least one layer",
                           path, backend);
            goto out;
        }
        if ((rc = parse_layers(v, c, path, err)))
            goto out;
    }
out:
    json_decref(root);
    return rc;
}

int model_config_load(const char *dir, const char *dir_name, struct model_config *c,
                      struct error *err)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return error_set(err, BG_ECONFIG, "%s: cannot open: %s", path, strerror(errno));
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len == cap) {
            cap = cap ? cap * 2 : 4096;
            if (cap > (16u << 20)) {
                free(buf);
                fclose(fp);
                return error_set(err, BG_ECONFIG, "%s: larger than 16 MiB", path);
            }
            char *n = realloc(buf, cap);
            if (!n) {
                free(buf);
                fclose(fp);
                return error_set(err, BG_ENOMEM, "%s: out of memory", path);
            }
            buf = n;
        }
        size_t r = fread(buf + len, 1, cap - len, fp);
        len += r;
        if (r == 0)
            break;
    }
    fclose(fp);
    int rc = model_config_parse(buf, len, path, dir_name, c, err);
    snprintf(c->dir, sizeof c->dir, "%s", dir);
    free(buf);
    return rc;
}

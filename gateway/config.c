/* config.c - see config.h. Unknown fields are errors: a typo in a limit must
 * not silently fall back to the default. */
#include "gateway/config.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "common/httpc.h"

void config_defaults(struct config *c)
{
    memset(c, 0, sizeof *c);
    snprintf(c->listen_host, sizeof c->listen_host, "127.0.0.1");
    c->listen_port = 8000;
    c->io_threads = 0;
    snprintf(c->model_repository, sizeof c->model_repository, "models");
    c->limits.max_header_bytes = 16384;
    c->limits.max_body_bytes = 67108864;
    c->limits.max_connections = 10000;
    c->limits.header_timeout_ms = 10000;
    c->limits.idle_timeout_ms = 60000;
    c->shutdown_timeout_ms = 30000;
    c->log_level = LOG_INFO;
    c->debug_endpoints = false;
    c->proxy.timeout_ms = 60000;
    c->proxy.max_idle = 64;
    c->proxy.model_metadata = true;
}

int config_set_listen(struct config *c, const char *hostport, const char *what, struct error *err)
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
    char *end;
    errno = 0;
    long port = strtol(colon + 1, &end, 10);
    if (colon[1] == '\0' || *end != '\0' || errno || port < 0 || port > 65535)
        return error_set(err, BG_ECONFIG, "%s: port in \"%s\" must be 0..65535", what, hostport);
    snprintf(c->listen_host, sizeof c->listen_host, "%s", host);
    c->listen_port = (int)port;
    return 0;
}

/* One field's name and its owner for messages like "cfg.json: limits.idle_timeout_ms: ..." */
struct field_ctx {
    const char *file;
    const char *prefix;   /* "" or "limits." */
    struct error *err;
};

static int get_int(struct field_ctx *f, json_t *v, const char *key, long long lo, long long hi,
                   long long *out)
{
    if (!json_is_integer(v))
        return error_set(f->err, BG_ECONFIG, "%s: %s%s: must be an integer in %lld..%lld",
                         f->file, f->prefix, key, lo, hi);
    long long x = json_integer_value(v);
    if (x < lo || x > hi)
        return error_set(f->err, BG_ECONFIG, "%s: %s%s: %lld is out of range %lld..%lld",
                         f->file, f->prefix, key, x, lo, hi);
    *out = x;
    return 0;
}

static int get_string(struct field_ctx *f, json_t *v, const char *key, char *dst, size_t cap)
{
    if (!json_is_string(v))
        return error_set(f->err, BG_ECONFIG, "%s: %s%s: must be a string", f->file, f->prefix, key);
    const char *s = json_string_value(v);
    if (strlen(s) >= cap)
        return error_set(f->err, BG_ECONFIG, "%s: %s%s: longer than %zu bytes", f->file,
                         f->prefix, key, cap - 1);
    snprintf(dst, cap, "%s", s);
    return 0;
}

/* A string that is a URL path: it starts with '/'. */
static int get_path(struct field_ctx *f, json_t *v, const char *key, char *dst, size_t cap)
{
    int rc = get_string(f, v, key, dst, cap);
    if (rc == 0 && dst[0] != '/')
        rc = error_set(f->err, BG_ECONFIG, "%s: %s%s: \"%s\" must start with /", f->file,
                       f->prefix, key, dst);
    return rc;
}

static int unknown_field(struct field_ctx *f, const char *key)
{
    return error_set(f->err, BG_ECONFIG, "%s: %s%s: unknown field", f->file, f->prefix, key);
}

static int load_limits(struct config *c, json_t *obj, const char *file, struct error *err)
{
    struct field_ctx f = {file, "limits.", err};
    if (!json_is_object(obj))
        return error_set(err, BG_ECONFIG, "%s: limits: must be an object", file);
    const char *key;
    json_t *v;
    json_object_foreach(obj, key, v) {
        long long x = 0;   /* get_int sets it; -O3 cannot prove that */
        int rc;
        if (strcmp(key, "max_header_bytes") == 0) {
            /* Below 256 not even a request line with a Host fits. */
            if ((rc = get_int(&f, v, key, 256, 16 << 20, &x)))
                return rc;
            c->limits.max_header_bytes = (size_t)x;
        } else if (strcmp(key, "max_body_bytes") == 0) {
            if ((rc = get_int(&f, v, key, 0, (long long)1 << 40, &x)))
                return rc;
            c->limits.max_body_bytes = (size_t)x;
        } else if (strcmp(key, "max_connections") == 0) {
            if ((rc = get_int(&f, v, key, 1, 1 << 24, &x)))
                return rc;
            c->limits.max_connections = (int)x;
        } else if (strcmp(key, "header_timeout_ms") == 0) {
            if ((rc = get_int(&f, v, key, 1, 3600 * 1000, &x)))
                return rc;
            c->limits.header_timeout_ms = (int)x;
        } else if (strcmp(key, "idle_timeout_ms") == 0) {
            if ((rc = get_int(&f, v, key, 1, 24 * 3600 * 1000, &x)))
                return rc;
            c->limits.idle_timeout_ms = (int)x;
        } else {
            return unknown_field(&f, key);
        }
    }
    return 0;
}

static int load_proxy_route(struct config_proxy_route *r, json_t *obj, const char *file, int idx,
                            struct error *err)
{
    char where[64];
    snprintf(where, sizeof where, "proxy.routes[%d].", idx);
    struct field_ctx f = {file, where, err};
    r->pipeline = 1;
    r->health_interval_ms = 2000;
    if (!json_is_object(obj))
        return error_set(err, BG_ECONFIG, "%s: proxy.routes[%d]: must be an object with prefix "
                                          "and urls", file, idx);
    const char *key;
    json_t *v;
    int rc;
    json_object_foreach(obj, key, v) {
        if (strcmp(key, "prefix") == 0) {
            if ((rc = get_path(&f, v, key, r->prefix, sizeof r->prefix)))
                return rc;
        } else if (strcmp(key, "urls") == 0) {
            if (!json_is_array(v) || json_array_size(v) == 0 ||
                json_array_size(v) > CONFIG_MAX_PROXY_URLS)
                return error_set(err, BG_ECONFIG, "%s: %surls: 1 to %d URLs like "
                                                  "\"http://host:port\"", file, where,
                                 CONFIG_MAX_PROXY_URLS);
            size_t i;
            json_t *u;
            json_array_foreach(v, i, u) {
                const char *s = json_string_value(u), *rest = NULL;
                if (httpc_url_parse(s, r->hosts[i], sizeof r->hosts[i], &r->ports[i], &rest) < 0 ||
                    (rest && strcmp(rest, "/") != 0))
                    return error_set(err, BG_ECONFIG, "%s: %surls[%zu]: \"%s\" is not "
                                                      "http://HOST:PORT", file, where, i,
                                     s ? s : "?");
            }
            r->nurls = (int)json_array_size(v);
        } else if (strcmp(key, "strip_prefix") == 0) {
            if (!json_is_boolean(v))
                return error_set(err, BG_ECONFIG, "%s: %sstrip_prefix: must be true or false",
                                 file, where);
            r->strip_prefix = json_is_true(v);
        } else if (strcmp(key, "pipeline") == 0) {
            long long x = 0;
            if ((rc = get_int(&f, v, key, 1, HTTPC_PIPELINE_MAX, &x)))
                return rc;
            r->pipeline = (int)x;
        } else if (strcmp(key, "health_path") == 0) {
            if ((rc = get_path(&f, v, key, r->health_path, sizeof r->health_path)))
                return rc;
        } else if (strcmp(key, "health_interval_ms") == 0) {
            long long x = 0;
            if ((rc = get_int(&f, v, key, 10, 3600 * 1000, &x)))
                return rc;
            r->health_interval_ms = (int)x;
        } else if (strcmp(key, "idempotent") == 0) {
            /* proxy.routes[].idempotent (bool, default false): the route's
             * POSTs may be repeated like GETs after a lost reused connection
             * (common/upcall.h); other methods follow RFC 9110 9.2.2. */
            if (!json_is_boolean(v))
                return error_set(err, BG_ECONFIG, "%s: %sidempotent: must be true or false",
                                 file, where);
            r->idempotent = json_is_true(v);
        } else {
            return unknown_field(&f, key);
        }
    }
    if (!r->prefix[0] || !r->nurls)
        return error_set(err, BG_ECONFIG, "%s: proxy.routes[%d]: needs both prefix and urls",
                         file, idx);
    return 0;
}

static int load_proxy(struct config *c, json_t *obj, const char *file, struct error *err)
{
    struct field_ctx f = {file, "proxy.", err};
    if (!json_is_object(obj))
        return error_set(err, BG_ECONFIG, "%s: proxy: must be an object", file);
    const char *key;
    json_t *v;
    json_object_foreach(obj, key, v) {
        long long x = 0;   /* get_int sets it; -O3 cannot prove that */
        int rc;
        if (strcmp(key, "routes") == 0) {
            if (!json_is_array(v) || json_array_size(v) > CONFIG_MAX_PROXY_ROUTES)
                return error_set(err, BG_ECONFIG, "%s: proxy.routes: must be a list of at most "
                                                  "%d routes", file, CONFIG_MAX_PROXY_ROUTES);
            size_t i;
            json_t *r;
            c->proxy.nroutes = 0;
            json_array_foreach(v, i, r) {
                struct config_proxy_route *dst = &c->proxy.routes[i];
                memset(dst, 0, sizeof *dst);
                if ((rc = load_proxy_route(dst, r, file, (int)i, err)))
                    return rc;
                for (size_t k = 0; k < i; k++)
                    if (strcmp(c->proxy.routes[k].prefix, dst->prefix) == 0)
                        return error_set(err, BG_ECONFIG, "%s: proxy.routes[%zu]: prefix \"%s\" "
                                                          "appears twice", file, i, dst->prefix);
                c->proxy.nroutes++;
            }
        } else if (strcmp(key, "timeout_ms") == 0) {
            if ((rc = get_int(&f, v, key, 1, 24 * 3600 * 1000, &x)))
                return rc;
            c->proxy.timeout_ms = (int)x;
        } else if (strcmp(key, "max_idle") == 0) {
            if ((rc = get_int(&f, v, key, 1, 100000, &x)))
                return rc;
            c->proxy.max_idle = (int)x;
        } else if (strcmp(key, "model_metadata") == 0) {
            if (!json_is_boolean(v))
                return error_set(err, BG_ECONFIG, "%s: proxy.model_metadata: must be true or "
                                                  "false", file);
            c->proxy.model_metadata = json_is_true(v);
        } else {
            return unknown_field(&f, key);
        }
    }
    return 0;
}

static int config_load_json(struct config *c, json_t *root, const char *file, struct error *err)
{
    struct field_ctx f = {file, "", err};
    if (!json_is_object(root))
        return error_set(err, BG_ECONFIG, "%s: the top level must be a JSON object", file);
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) {
        long long x = 0;   /* get_int sets it; -O3 cannot prove that */
        int rc;
        if (strcmp(key, "listen") == 0) {
            char tmp[300];
            char what[4200];
            if ((rc = get_string(&f, v, key, tmp, sizeof tmp)))
                return rc;
            snprintf(what, sizeof what, "%s: listen", file);
            if ((rc = config_set_listen(c, tmp, what, err)))
                return rc;
        } else if (strcmp(key, "io_threads") == 0) {
            if ((rc = get_int(&f, v, key, 0, 1024, &x)))
                return rc;
            c->io_threads = (int)x;
        } else if (strcmp(key, "model_repository") == 0) {
            if ((rc = get_string(&f, v, key, c->model_repository, sizeof c->model_repository)))
                return rc;
            if (!c->model_repository[0])
                return error_set(err, BG_ECONFIG, "%s: model_repository: must not be empty", file);
            c->model_repository_set = true;
        } else if (strcmp(key, "limits") == 0) {
            if ((rc = load_limits(c, v, file, err)))
                return rc;
        } else if (strcmp(key, "proxy") == 0) {
            if ((rc = load_proxy(c, v, file, err)))
                return rc;
        } else if (strcmp(key, "shutdown_timeout_ms") == 0) {
            if ((rc = get_int(&f, v, key, 0, 3600 * 1000, &x)))
                return rc;
            c->shutdown_timeout_ms = (int)x;
        } else if (strcmp(key, "log_file") == 0) {
            if ((rc = get_string(&f, v, key, c->log_file, sizeof c->log_file)))
                return rc;
        } else if (strcmp(key, "log_level") == 0) {
            char tmp[16];
            if ((rc = get_string(&f, v, key, tmp, sizeof tmp)) ||
                log_level_parse(tmp, &c->log_level) < 0)
                return error_set(err, BG_ECONFIG,
                                 "%s: log_level: must be one of debug, info, warn, error", file);
        } else if (strcmp(key, "debug_endpoints") == 0) {
            if (!json_is_boolean(v))
                return error_set(err, BG_ECONFIG, "%s: debug_endpoints: must be true or false", file);
            c->debug_endpoints = json_is_true(v);
        } else {
            return unknown_field(&f, key);
        }
    }
    return 0;
}

int config_load_string(struct config *c, const char *json, const char *name, struct error *err)
{
    json_error_t jerr;
    json_t *root = json_loads(json, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return error_set(err, BG_ECONFIG, "%s: line %d, column %d: invalid JSON: %s", name,
                         jerr.line, jerr.column, jerr.text);
    int rc = config_load_json(c, root, name, err);
    json_decref(root);
    return rc;
}

int config_load_file(struct config *c, const char *path, struct error *err)
{
    json_error_t jerr;
    FILE *fp = fopen(path, "r");
    if (!fp)
        return error_set(err, BG_ECONFIG, "%s: cannot open: %s", path, strerror(errno));
    json_t *root = json_loadf(fp, JSON_REJECT_DUPLICATES, &jerr);
    fclose(fp);
    if (!root)
        return error_set(err, BG_ECONFIG, "%s: line %d, column %d: invalid JSON: %s", path,
                         jerr.line, jerr.column, jerr.text);
    int rc = config_load_json(c, root, path, err);
    json_decref(root);
    return rc;
}

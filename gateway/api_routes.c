/* api_routes.c - see api.h: the route tables and the extension names they
 * carry. Registration runs once, on main's thread, before the server
 * starts, so st's list needs no lock: handlers only read it. */
#include "gateway/api.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "common/buf.h"
#include "serving/tensor_json.h"

/* Seconds: the jobs runner's own pause after a refused write is 1-30 s. */
#define API_STORAGE_RETRY_S "5"

void api_respond_code(struct http_request *req, int code, const char *msg)
{
    if (code < 0)
        code = -code;
    http_respond_error(req, error_http_status(code),
                       code == BG_ESTORAGE ? "Retry-After: " API_STORAGE_RETRY_S "\r\n" : NULL,
                       "%s", msg);
}

int api_query_check(struct http_request *req, const char *const *known, int n, bool others_ok,
                    const char *route)
{
    size_t len;
    const char *q = http_request_query(req, &len);
    uint64_t seen = 0;
    while (q && len > 0) {
        const char *amp = memchr(q, '&', len);
        size_t pn = amp ? (size_t)(amp - q) : len;
        const char *eq = memchr(q, '=', pn);
        size_t kl = eq ? (size_t)(eq - q) : pn;
        int k = -1;
        for (int i = 0; i < n && i < 64 && k < 0; i++)
            if (strlen(known[i]) == kl && memcmp(known[i], q, kl) == 0)
                k = i;
        if (k >= 0 && (seen & (1ull << k))) {
            http_request_set_error_param(req, known[k]);
            http_respond_error(req, 400, NULL, "%s is given twice", known[k]);
            return -1;
        }
        if (k >= 0) {
            seen |= 1ull << k;
        } else if (pn > 0 && !others_ok) {   /* "a=1&&b=2": nothing between; "=x" is nameless */
            char names[256] = "";
            size_t used = 0;
            for (int i = 0; i < n && used < sizeof names; i++)
                used += (size_t)snprintf(names + used, sizeof names - used, "%s%s",
                                         i == 0 ? "" : i == n - 1 ? " and " : ", ", known[i]);
            http_respond_error(req, 400, NULL, "unknown parameter \"%.*s\": %s takes %s",
                               (int)(kl > 64 ? 64 : kl), q, route, names);
            return -1;
        }
        q += pn + (amp ? 1 : 0);
        len -= pn + (amp ? 1 : 0);
    }
    return 0;
}

static int api_extension_record(struct api_state *st, const char *name, struct error *err)
{
    for (int i = 0; i < st->nextensions; i++)
        if (strcmp(st->extensions[i], name) == 0)
            return 0;
    if (st->nextensions == API_EXTENSIONS_MAX)
        return error_set(err, BG_EINVAL, "more than %d extension names: raise API_EXTENSIONS_MAX",
                         API_EXTENSIONS_MAX);
    st->extensions[st->nextensions++] = name;
    return 0;
}

int api_routes_add(struct router *r, struct api_state *st, const struct api_route *routes,
                   size_t n, struct error *err)
{
    for (size_t i = 0; i < n; i++) {
        int rc = router_add(r, routes[i].methods, routes[i].pattern, routes[i].fn, st, err);
        if (rc)
            return rc;
        for (const char *const *e = routes[i].extensions; e && *e; e++)
            if ((rc = api_extension_record(st, *e, err)))
                return rc;
    }
    return 0;
}

int api_extensions_append(const struct api_state *st, struct buf *out)
{
    int rc = buf_append(out, "[", 1);
    for (int i = 0; i < st->nextensions; i++) {
        if (i)
            rc |= buf_append(out, ",", 1);
        rc |= json_append_string(out, st->extensions[i], strlen(st->extensions[i]));
    }
    return rc | buf_append(out, "]", 1) ? -1 : 0;
}

/* api_shm.c - Triton's system shared memory extension: the register,
 * unregister and status routes under /v2/systemsharedmemory (the regions
 * themselves: shmreg.h; their use by inference: api_models.c through
 * api_shm_resolver).
 *
 * A region maps memory of the host the server runs on, named by a key the
 * caller chose: only a caller on that host can have made it, and a remote
 * caller naming a key could read and overwrite whatever object of the
 * server's user has that name. So every route here, and inference that
 * names a region, is served to loopback peers only unless
 * shared_memory.allow_remote says otherwise (403), and to admin keys only
 * once keys exist (auth.c's rules for the routes; api_shm_check for
 * inference, whose route is anyone's). batchgate has no unix-socket
 * listener, so loopback is the only local transport. */
#include "gateway/api.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "common/buf.h"
#include "common/utf8.h"
#include "gateway/auth.h"
#include "gateway/shmreg.h"
#include "serving/tensor_json.h"

/* 0 when the caller may use system shared memory, else answers 403 (or,
 * with answer false, only fills err) and returns -BG_EFORBIDDEN. */
static int api_shm_allowed(struct api_state *st, struct http_request *req, struct error *err)
{
    if (!st->shm)
        return error_set(err, BG_EFORBIDDEN, "system shared memory is not served by this "
                         "server");
    if (!st->shm_allow_remote) {
        char peer[64];
        http_request_peer(req, peer, sizeof peer);
        if (!shmreg_peer_is_loopback(peer))
            return error_set(err, BG_EFORBIDDEN, "system shared memory is served to clients on "
                             "this host only (loopback; %s is not): a region maps memory of "
                             "the server's host; shared_memory.allow_remote in the config "
                             "lifts this", peer[0] ? peer : "the peer");
    }
    /* The routes' own admin rule is the guard's (auth.c); inference's route
     * is any tenant's, so it is checked here. */
    if (st->auth && !auth_is_admin(st->auth, auth_tenant(req)))
        return error_set(err, BG_EFORBIDDEN, "system shared memory is for admin keys only "
                         "(tenant \"%s\" is not admin)",
                         auth_tenant_name(st->auth, auth_tenant(req)));
    return 0;
}

static bool api_shm_gate(struct api_state *st, struct http_request *req)
{
    struct error err = {0};
    if (api_shm_allowed(st, req, &err) == 0)
        return true;
    http_respond_error(req, error_http_status(err.code), NULL, "%s", err.msg);
    return false;
}

/* The route's {name} into out (the router has %-decoded it: tritonclient
 * quotes it; decoding it again here took "a%2541" for "aA", and a name
 * with a '%' of its own could not be registered); false (answered 400)
 * when empty, too long or not UTF-8. */
static bool api_shm_name(struct http_request *req, const struct route_match *m, char *out,
                         size_t cap)
{
    const struct route_param *p = route_match_param(m, "name");
    if (p && p->len > 0 && p->len < cap && utf8_valid(p->value, p->len)) {
        memcpy(out, p->value, p->len);   /* the router refused NUL */
        out[p->len] = '\0';
        return true;
    }
    http_respond_error(req, 400, NULL, "region name: must be 1 to %zu bytes of UTF-8 "
                       "(%%-escapes allowed)", cap - 1);
    return false;
}

static void api_shm_respond_json(struct http_request *req, struct buf *b)
{
    http_respond(req, 200, "application/json", b->data, b->len, NULL);
    buf_free(b);
}

/* GET /v2/systemsharedmemory[/region/{name}]/status */
static void api_shm_on_status(struct http_request *req, const struct route_match *m, void *ctx)
{
    struct api_state *st = ctx;
    char name[SHMREG_NAME_MAX];
    if (!api_shm_gate(st, req))
        return;
    bool one = route_match_param(m, "name") != NULL;
    if (one && !api_shm_name(req, m, name, sizeof name))
        return;
    struct buf b = BUF_INIT;
    struct error err = {0};
    if (shmreg_status_json(st->shm, one ? name : NULL, &b, &err)) {
        buf_free(&b);
        http_respond_error(req, error_http_status(err.code), NULL, "%s", err.msg);
        return;
    }
    api_shm_respond_json(req, &b);
}

/* A non-negative integer member of the register body; `def` when absent
 * and optional. */
static int api_shm_u64(json_t *root, const char *key, bool required, uint64_t *out,
                       struct error *err)
{
    json_t *v = json_object_get(root, key);
    if (!v && !required) {
        *out = 0;
        return 0;
    }
    if (!v)
        return error_set(err, BG_EINVAL, "%s: missing (the body is {\"key\", \"offset\", "
                         "\"byte_size\"})", key);
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return error_set(err, BG_EINVAL, "%s: must be an integer >= 0", key);
    *out = (uint64_t)json_integer_value(v);
    return 0;
}

/* POST /v2/systemsharedmemory/region/{name}/register {"key", "offset", "byte_size"} */
static void api_shm_on_register(struct http_request *req, const struct route_match *m, void *ctx)
{
    struct api_state *st = ctx;
    char name[SHMREG_NAME_MAX];
    if (!api_shm_gate(st, req) || !api_shm_name(req, m, name, sizeof name))
        return;
    json_t *root = api_body_object(req, false, "{\"key\", \"offset\", \"byte_size\"}");
    if (!root)
        return;
    struct error err = {0};
    uint64_t offset = 0, size = 0;
    json_t *key = json_object_get(root, "key");
    int rc;
    if (!json_is_string(key))
        rc = error_set(&err, BG_EINVAL, "key: must be a string: the shared memory object's "
                       "name, as given to shm_open");
    else if (!(rc = api_shm_u64(root, "offset", false, &offset, &err)) &&
             !(rc = api_shm_u64(root, "byte_size", true, &size, &err)))
        rc = shmreg_register(st->shm, name, json_string_value(key), offset, size, &err);
    json_decref(root);
    if (rc) {
        http_respond_error(req, error_http_status(err.code), NULL, "%s", err.msg);
        return;
    }
    http_respond(req, 200, "application/json", "{}", 2, NULL);
}

/* POST /v2/systemsharedmemory[/region/{name}]/unregister. As Triton, a
 * name that is not registered is no error: unregistering is idempotent. */
static void api_shm_on_unregister(struct http_request *req, const struct route_match *m, void *ctx)
{
    struct api_state *st = ctx;
    char name[SHMREG_NAME_MAX];
    if (!api_shm_gate(st, req))
        return;
    if (route_match_param(m, "name")) {
        if (!api_shm_name(req, m, name, sizeof name))
            return;
        shmreg_unregister(st->shm, name, NULL);
    } else {
        shmreg_unregister_all(st->shm);
    }
    http_respond(req, 200, "application/json", "{}", 2, NULL);
}

/* ---- CUDA shared memory: none ----
 * batchgate maps no CUDA IPC handles, but Triton's clients clean up both
 * kinds (perf_analyzer --shared-memory system unregisters CUDA regions too,
 * at start and at exit, and gives up when that fails): so there is always
 * none to list or unregister, and registering one is 400. Not listed as an
 * extension (cuda_shared_memory). */

static void api_cudashm_on_status(struct http_request *req, const struct route_match *m,
                                  void *ctx)
{
    if (route_match_param(m, "name")) {
        http_respond_error(req, 404, NULL, "no CUDA shared memory region is registered: "
                           "batchgate serves system shared memory only");
        return;
    }
    http_respond(req, 200, "application/json", "[]", 2, NULL);
}

static void api_cudashm_on_register(struct http_request *req, const struct route_match *m,
                                    void *ctx)
{
    http_respond_error(req, 400, NULL, "CUDA shared memory is not served: use system shared "
                       "memory (/v2/systemsharedmemory/region/{name}/register)");
}

static void api_cudashm_on_unregister(struct http_request *req, const struct route_match *m,
                                      void *ctx)
{
    http_respond(req, 200, "application/json", "{}", 2, NULL);
}

/* ---- inference's side (api.h) ---- */

void api_shm_use_release(struct api_shm_use *u)
{
    for (int i = 0; i < u->nheld; i++)
        shmreg_release(u->held[i]);
    u->nheld = 0;
}

int api_shm_resolve(void *ctx, const struct tensor_shm *ref, const char *what, void **bytes,
                    struct error *err)
{
    struct api_shm_use *u = ctx;
    int rc = api_shm_allowed(u->st, u->req, err);
    if (rc)
        return rc;
    if (u->nheld == (int)(sizeof u->held / sizeof u->held[0]))
        return error_set(err, BG_EINVAL, "%s: too many shared memory tensors", what);
    struct shmreg_region *g;
    rc = shmreg_acquire(u->st->shm, ref->region, ref->offset, ref->byte_size, what, &g, bytes,
                        err);
    if (rc == 0)
        u->held[u->nheld++] = g;
    return rc;
}

int api_shm_register(struct router *r, struct api_state *st, struct error *err)
{
    static const char *const sys[] = {"system_shared_memory", NULL};
    /* CUDA's routes exist only so that perf_analyzer's start and exit
     * (which unregister every CUDA region) succeed: register refuses, so
     * they carry no extension name. */
    static const struct api_route routes[] = {
        {HTTP_M_GET, "/v2/systemsharedmemory/status", api_shm_on_status, sys},
        {HTTP_M_GET, "/v2/systemsharedmemory/region/{name}/status", api_shm_on_status, sys},
        {HTTP_M_POST, "/v2/systemsharedmemory/region/{name}/register", api_shm_on_register, sys},
        {HTTP_M_POST, "/v2/systemsharedmemory/unregister", api_shm_on_unregister, sys},
        {HTTP_M_POST, "/v2/systemsharedmemory/region/{name}/unregister", api_shm_on_unregister,
         sys},
        {HTTP_M_GET, "/v2/cudasharedmemory/status", api_cudashm_on_status, NULL},
        {HTTP_M_GET, "/v2/cudasharedmemory/region/{name}/status", api_cudashm_on_status, NULL},
        {HTTP_M_POST, "/v2/cudasharedmemory/region/{name}/register", api_cudashm_on_register, NULL},
        {HTTP_M_POST, "/v2/cudasharedmemory/unregister", api_cudashm_on_unregister, NULL},
        {HTTP_M_POST, "/v2/cudasharedmemory/region/{name}/unregister", api_cudashm_on_unregister,
         NULL},
    };
    return api_routes_add(r, st, routes, sizeof routes / sizeof routes[0], err);
}

/* auth.h - who is calling, and may they (SPEC.md "Tenants and keys").
 *
 * The request's API key (`Authorization: Bearer KEY`, else `X-Api-Key:
 * KEY`) names its tenant: the key's SHA-256 digest is compared with every
 * digest of the configuration in constant time. No key, or a key no tenant
 * holds, is the tenant `default` (index 0) unless auth.required (401).
 *
 * One check runs before every handler: auth_guard, installed as the
 * router's guard (http.h: router_set_guard) by main. It classes the route
 * by its pattern (auth_route_class: open, any tenant, admin only), answers
 * 401 and 403 itself, and leaves the tenant on the request
 * (http_request_tag) for the handlers (auth_tenant). Whether the tenant may
 * use a model named in the route (`{model}`) is checked there too; routes
 * that name a model elsewhere, or own objects of a tenant (jobs), check
 * with auth_may_use_model and auth_is_admin.
 *
 * Keys never leave this module: nothing here logs or answers with one. */
#ifndef BG_AUTH_H
#define BG_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "http/http.h"
#include "serving/tenant.h"

struct auth;
struct tenantstats;

/* The table must outlive the struct auth (main's config does); the guard
 * counts its refusals into `stats` (may be NULL). */
struct auth *auth_new(const struct tenants_config *t, struct tenantstats *stats,
                      struct error *err);
void auth_free(struct auth *a);
const struct tenants_config *auth_tenants(const struct auth *a);
/* The keys of t (the same tenants, in the same order, as the table of
 * auth_new; SIGHUP's reread of the file) replace those in force, all at
 * once: a request's guard sees either set, never a mix. Bit i of
 * *changed: tenant i's keys differ. 1 when they were replaced, 0 when none differs, or a negative code with err filled. */
int auth_replace_keys(struct auth *a, const struct tenants_config *t, uint64_t *changed,
                      struct error *err);

/* The index of the tenant holding `key`, or -1. Its time depends on the
 * key's length and the number of configured keys only: the digest is
 * compared with every configured digest, byte by byte, without an early
 * exit (the same work whichever key matches, and however much of it). */
int auth_key_tenant(const struct auth *a, const char *key, size_t len);
/* The same for a digest (the part that must not depend on the match). */
int auth_digest_tenant(const struct auth *a, const uint8_t digest[TENANT_DIGEST_LEN]);

/* Where a key was found. */
enum auth_key_from { AUTH_KEY_NONE, AUTH_KEY_BEARER, AUTH_KEY_X_API_KEY };

/* The request's key: the token of `Authorization: Bearer` (scheme in any
 * case), else the value of `X-Api-Key`; NULL when it has neither (an
 * Authorization of another scheme is not a key here: it may be meant for a
 * proxied server). Points into the request; *from says which header. */
const char *auth_request_key(struct http_request *req, size_t *len, enum auth_key_from *from);

/* Whether the header (name, value) of req carries a key some tenant holds
 * (a Bearer token of Authorization, or X-Api-Key), whichever header named
 * the request's tenant: this server's credentials, which the reverse proxy
 * does not pass on. The header the guard read a tenant's key from is
 * known without hashing it again. */
bool auth_header_holds_key(const struct auth *a, const struct http_request *req,
                           const char *name, size_t nl, const char *val, size_t vl);

enum auth_route {
    AUTH_ROUTE_OPEN,     /* no key looked at: health, metrics, dashboard */
    AUTH_ROUTE_TENANT,   /* any tenant; a key when auth.required */
    AUTH_ROUTE_ADMIN,    /* an admin tenant's key, once any tenant has keys */
};
/* The class of a route by its pattern ("/v2/models/{model}/infer") and
 * the request's method (one HTTP_M_* bit). */
enum auth_route auth_route_class(const char *pattern, int method);

/* Any tenant has a key. Before any had one, every caller is `default`
 * and the admin routes are open to it; once keys were in force they stay
 * an admin's, every key removed by a SIGHUP included (auth_is_admin). */
bool auth_keys_exist(const struct auth *a);
bool auth_is_admin(const struct auth *a, int tenant);
/* The tenant's `models` globs (none: every model) match the name. */
bool auth_may_use_model(const struct auth *a, int tenant, const char *model, size_t len);
const char *auth_tenant_name(const struct auth *a, int tenant);

/* Whether the request names a caller the guard would take on a tenant's
 * route: a key it knows, or no key where none is required. For work done
 * before the route is known (a gRPC message inflated and read to learn
 * its route); ctx: the struct auth. */
bool auth_caller_known(const struct http_request *req, void *ctx);
/* The router's guard (route_guard_fn; ctx: the struct auth). */
bool auth_guard(struct http_request *req, const struct route_match *m, void *ctx);
/* The guard's model rule for a model named in the body (the embeddings
 * routes): true when the request's tenant may use it, else answers 403
 * and returns false. a may be NULL (no tenants: any model). */
bool auth_check_model(struct auth *a, struct http_request *req, const char *model, size_t len);
/* The guard's tag on a request: the tenant's index in the low bits (the
 * bits above are auth.c's). */
#define AUTH_TAG_TENANT_MASK 0xffff

/* The tenant the guard found for the request (0, `default`, on open routes). */
static inline int auth_tenant(const struct http_request *req)
{
    return http_request_tag(req) & AUTH_TAG_TENANT_MASK;
}

#endif

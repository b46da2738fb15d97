/* auth.c - see auth.h. */
#include "gateway/auth.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/sha256.h"
#include "gateway/tenantstats.h"

/* A model name longer than this matches no glob (names are shorter). */
#define AUTH_MODEL_MAX 256

struct auth_key {
    uint8_t d[TENANT_DIGEST_LEN];
    int tenant;
};

/* Every tenant's keys in one array: one loop compares all. Published
 * whole (auth_replace_keys), so a key moved from one tenant to another
 * never names both or neither. */
struct auth_keyset {
    struct auth_keyset *replaced;     /* the set this one replaced: kept until auth_free */
    int n;
    struct auth_key k[];
};

struct auth {
    const struct tenants_config *t;
    struct tenantstats *stats;
    _Atomic(struct auth_keyset *) keys;
    /* Some tenant has had keys: the admin routes are an admin's from then
     * on. Opened again when a SIGHUP removed every key, they were
     * everyone's (the re-test): an operator pulling every key at once got
     * the opposite of a lockout. */
    _Atomic bool keyed;
};

static struct auth_keyset *auth_keyset_new(const struct tenants_config *t)
{
    int n = 0;
    for (int i = 0; i < t->n; i++)
        n += t->t[i].nkeys;
    struct auth_keyset *s = calloc(1, sizeof *s + (size_t)n * sizeof s->k[0]);
    if (!s)
        return NULL;
    for (int i = 0; i < t->n; i++)
        for (int k = 0; k < t->t[i].nkeys; k++) {
            memcpy(s->k[s->n].d, t->t[i].keys[k], TENANT_DIGEST_LEN);
            s->k[s->n++].tenant = i;
        }
    return s;
}

static const struct auth_keyset *auth_keys(const struct auth *a)
{
    return atomic_load_explicit(&a->keys, memory_order_acquire);
}

struct auth *auth_new(const struct tenants_config *t, struct tenantstats *stats,
                      struct error *err)
{
    struct auth *a = calloc(1, sizeof *a);
    struct auth_keyset *s = a ? auth_keyset_new(t) : NULL;
    if (!s) {
        free(a);
        error_set(err, BG_ENOMEM, "out of memory for the tenants' keys");
        return NULL;
    }
    a->t = t;
    a->stats = stats;
    atomic_init(&a->keys, s);
    atomic_init(&a->keyed, s->n > 0);
    return a;
}

void auth_free(struct auth *a)
{
    if (!a)
        return;
    for (struct auth_keyset *s = atomic_load(&a->keys), *next; s; s = next) {
        next = s->replaced;
        free(s);
    }
    free(a);
}

/* Does tenant i hold the same keys in both sets (in any order)? */
static bool auth_tenant_keys_same(const struct auth_keyset *x, const struct auth_keyset *y,
                                  int i)
{
    int nx = 0, ny = 0;
    for (int k = 0; k < x->n; k++)
        nx += x->k[k].tenant == i;
    for (int k = 0; k < y->n; k++) {
        if (y->k[k].tenant != i)
            continue;
        ny++;
        bool found = false;
        for (int j = 0; j < x->n && !found; j++)
            found = x->k[j].tenant == i && memcmp(x->k[j].d, y->k[k].d, TENANT_DIGEST_LEN) == 0;
        if (!found)
            return false;
    }
    return nx == ny;
}

int auth_replace_keys(struct auth *a, const struct tenants_config *t, uint64_t *changed,
                      struct error *err)
{
    *changed = 0;
    struct auth_keyset *cur = atomic_load_explicit(&a->keys, memory_order_relaxed);
    struct auth_keyset *s = auth_keyset_new(t);
    if (!s)
        return error_set(err, BG_ENOMEM, "out of memory for the tenants' keys");
    for (int i = 0; i < a->t->n && i < 64; i++)
        if (!auth_tenant_keys_same(cur, s, i))
            *changed |= 1ull << i;
    if (!*changed) {
        free(s);
        return 0;
    }
    /* The set replaced may still be read by a request's guard: it is
     * kept, not freed (a few KB per change of keys). */
    s->replaced = cur;
    if (s->n > 0)
        atomic_store(&a->keyed, true);
    atomic_store_explicit(&a->keys, s, memory_order_release);
    return 1;
}

const struct tenants_config *auth_tenants(const struct auth *a) { return a->t; }
bool auth_keys_exist(const struct auth *a) { return auth_keys(a)->n > 0; }

int auth_digest_tenant(const struct auth *a, const uint8_t digest[TENANT_DIGEST_LEN])
{
    /* Every key, every byte, whatever matched before: the differences are
     * ORed together (as four 64-bit words) and the match turned into a
     * mask, with no branch on a secret. Keys are unique
     * (config_tenants.c), so at most one matches. */
    enum { WORDS = TENANT_DIGEST_LEN / 8 };
    uint64_t d[WORDS];
    memcpy(d, digest, sizeof d);
    unsigned found = 0;   /* the matching key's tenant + 1; 0: none */
    const struct auth_keyset *s = auth_keys(a);
    for (int i = 0; i < s->n; i++) {
        uint64_t k[WORDS], diff = 0;
        memcpy(k, s->k[i].d, sizeof k);
        for (int w = 0; w < WORDS; w++)
            diff |= k[w] ^ d[w];
        /* Keeps the compiler from turning what follows into a branch. */
        __asm__("" : "+r"(diff));
        unsigned eq = (unsigned)(((diff | (0 - diff)) >> 63) ^ 1);   /* 1 when diff is 0 */
        found |= (0u - eq) & (unsigned)(s->k[i].tenant + 1);
    }
    return (int)found - 1;
}

int auth_key_tenant(const struct auth *a, const char *key, size_t len)
{
    uint8_t d[SHA256_DIGEST_LEN];
    sha256(key, len, d);
    return auth_digest_tenant(a, d);
}

static const char *auth_trim(const char *v, size_t *n)
{
    while (*n && (*v == ' ' || *v == '\t')) {
        v++;
        (*n)--;
    }
    while (*n && (v[*n - 1] == ' ' || v[*n - 1] == '\t'))
        (*n)--;
    return v;
}

const char *auth_request_key(struct http_request *req, size_t *len, enum auth_key_from *from)
{
    size_t n;
    *from = AUTH_KEY_NONE;
    const char *v = http_request_header(req, "Authorization", &n);
    if (v && n > 7 && strncasecmp(v, "Bearer ", 7) == 0) {
        n -= 7;
        v = auth_trim(v + 7, &n);
        if (n) {
            *len = n;
            *from = AUTH_KEY_BEARER;
            return v;
        }
    }
    v = http_request_header(req, "X-Api-Key", &n);
    if (v) {
        v = auth_trim(v, &n);
        if (n) {
            *len = n;
            *from = AUTH_KEY_X_API_KEY;
            return v;
        }
    }
    return NULL;
}

/* The guard's tag above the tenant's index: which header held the key
 * that named the tenant, so that the proxy drops that header without
 * hashing its key a second time. */
#define AUTH_TAG_KEY_BEARER (1 << 16)
#define AUTH_TAG_KEY_X_API_KEY (1 << 17)

bool auth_header_holds_key(const struct auth *a, const struct http_request *req,
                           const char *name, size_t nl, const char *val, size_t vl)
{
    int tag = http_request_tag(req);
    if (nl == 13 && strncasecmp(name, "Authorization", 13) == 0) {
        if (tag & AUTH_TAG_KEY_BEARER)
            return true;
        if (vl <= 7 || strncasecmp(val, "Bearer ", 7) != 0)
            return false;   /* another scheme: not ours */
        val += 7;
        vl -= 7;
    } else if (nl == 9 && strncasecmp(name, "X-Api-Key", 9) == 0) {
        if (tag & AUTH_TAG_KEY_X_API_KEY)
            return true;
    } else {
        return false;
    }
    val = auth_trim(val, &vl);
    return vl > 0 && auth_key_tenant(a, val, vl) >= 0;
}

/* The key header that appears more than once, or NULL. */
static const char *auth_header_repeated(const struct http_request *req)
{
    if (http_request_header_times(req, "Authorization") > 1)
        return "Authorization";
    if (http_request_header_times(req, "X-Api-Key") > 1)
        return "X-Api-Key";
    return NULL;
}

/* Routes by pattern; a pattern ending in '/' covers every route under it.
 * The first row that matches decides; no row: any tenant. New admin routes
 * (the repository's, governance's) are one row each, and the routes SPEC.md
 * names are here before their handlers exist. */
static const struct auth_rule {
    int methods;                      /* HTTP_M_* bits; 0: every method */
    const char *pattern;
    enum auth_route cls;
} auth_rules[] = {
    {0, "/v2/health/", AUTH_ROUTE_OPEN},
    {0, "/metrics", AUTH_ROUTE_OPEN},
    /* The dashboard shows what /metrics shows, and a browser sends no key. */
    {0, "/dashboard", AUTH_ROUTE_OPEN},
    {0, "/dashboard/", AUTH_ROUTE_OPEN},
    {0, "/debug/", AUTH_ROUTE_ADMIN},
    /* Reading the shares in force is anyone's; changing them an admin's. */
    {HTTP_M_PUT | HTTP_M_POST | HTTP_M_PATCH | HTTP_M_DELETE, "/v2/governance", AUTH_ROUTE_ADMIN},
    {0, "/v2/repository/", AUTH_ROUTE_ADMIN},
    {0, "/v2/logging", AUTH_ROUTE_ADMIN},
    {0, "/v2/systemsharedmemory", AUTH_ROUTE_ADMIN},
    {0, "/v2/systemsharedmemory/", AUTH_ROUTE_ADMIN},
};

enum auth_route auth_route_class(const char *pattern, int method)
{
    if (!pattern)
        return AUTH_ROUTE_TENANT;
    for (size_t i = 0; i < sizeof auth_rules / sizeof auth_rules[0]; i++) {
        const struct auth_rule *r = &auth_rules[i];
        if (r->methods && !(r->methods & method))
            continue;
        size_t n = strlen(r->pattern);
        bool under = r->pattern[n - 1] == '/';
        if (under ? strncmp(pattern, r->pattern, n) == 0 : strcmp(pattern, r->pattern) == 0)
            return r->cls;
    }
    return AUTH_ROUTE_TENANT;
}

bool auth_is_admin(const struct auth *a, int tenant)
{
    return !atomic_load_explicit(&a->keyed, memory_order_relaxed) || (tenant >= 0 && tenant < a->t->n && a->t->t[tenant].admin);
}

const char *auth_tenant_name(const struct auth *a, int tenant)
{
    return tenant >= 0 && tenant < a->t->n ? a->t->t[tenant].name : "?";
}

bool auth_may_use_model(const struct auth *a, int tenant, const char *model, size_t len)
{
    if (tenant < 0 || tenant >= a->t->n)
        return false;
    const struct tenant_config *t = &a->t->t[tenant];
    if (t->nmodels == 0)
        return true;
    char name[AUTH_MODEL_MAX];
    if (len >= sizeof name)
        return false;
    memcpy(name, model, len);
    name[len] = '\0';
    return tenant_allows(t, name);
}

bool auth_caller_known(const struct http_request *req, void *ctx)
{
    struct auth *a = ctx;
    size_t klen = 0;
    enum auth_key_from from;
    const char *key = auth_request_key((struct http_request *)req, &klen, &from);
    return key ? auth_key_tenant(a, key, klen) >= 0 : !a->t->auth_required;
}

bool auth_guard(struct http_request *req, const struct route_match *m, void *ctx)
{
    struct auth *a = ctx;
    int method = http_request_method(req);
    enum auth_route cls = auth_route_class(m->pattern, method);
    if (cls == AUTH_ROUTE_OPEN)
        return true;
    /* Two keys in one request would leave the tenant to header order, which
     * a proxy on the way may change: refuse rather than pick one. */
    const char *twice = auth_header_repeated(req);
    if (twice) {
        http_respond_error(req, error_http_status(BG_EINVAL), NULL,
                           "the request carries more than one %s header: send one key", twice);
        return false;
    }
    size_t klen = 0;
    enum auth_key_from from;
    const char *key = auth_request_key(req, &klen, &from);
    int tenant = key ? auth_key_tenant(a, key, klen) : -1;
    int tag = tenant < 0                 ? 0
              : from == AUTH_KEY_BEARER ? AUTH_TAG_KEY_BEARER
                                        : AUTH_TAG_KEY_X_API_KEY;
    if (tenant < 0) {
        if (a->t->auth_required) {
            /* RFC 6750 section 3; the key itself is never repeated. */
            int status = error_http_status(BG_EUNAUTHORIZED);
            tenantstats_refused(a->stats, http_request_thread(req),
                                key ? TS_REFUSED_UNKNOWN_KEY : TS_REFUSED_NO_KEY);
            if (key)
                http_respond_error(req, status, "WWW-Authenticate: Bearer realm=\"batchgate\", "
                                   "error=\"invalid_token\"\r\n",
                                   "the API key is not one this server knows");
            else
                http_respond_error(req, status, "WWW-Authenticate: Bearer realm=\"batchgate\"\r\n",
                                   "an API key is required: send \"Authorization: Bearer KEY\" "
                                   "or \"X-Api-Key: KEY\"");
            return false;
        }
        tenant = 0;
    }
    http_request_set_tag(req, tenant | tag);
    if (cls == AUTH_ROUTE_ADMIN && !auth_is_admin(a, tenant)) {
        size_t plen;
        const char *path = http_request_path(req, &plen);
        tenantstats_refused(a->stats, http_request_thread(req), TS_REFUSED_ADMIN_ROUTE);
        http_respond_error(req, error_http_status(BG_EFORBIDDEN), NULL,
                           "%s %.*s is an admin route and tenant \"%s\" is not an admin",
                           http_request_method_name(req), (int)(plen > 200 ? 200 : plen), path,
                           auth_tenant_name(a, tenant));
        return false;
    }
    const struct route_param *p = route_match_param(m, "model");
    if (p) {
        /* TF Serving's verb shares the segment ("digits:predict"); model
         * names hold no ':' (backends/model.c). */
        const char *colon = memchr(p->value, ':', p->len);
        size_t n = colon ? (size_t)(colon - p->value) : p->len;
        return auth_check_model(a, req, p->value, n);
    }
    return true;
}

bool auth_check_model(struct auth *a, struct http_request *req, const char *model, size_t n)
{
    int tenant = auth_tenant(req);
    if (!a || auth_may_use_model(a, tenant, model, n))
        return true;
    tenantstats_refused(a->stats, http_request_thread(req), TS_REFUSED_MODEL);
    http_respond_error(req, error_http_status(BG_EFORBIDDEN), NULL,
                       "tenant \"%s\" may not use model \"%.*s\"", auth_tenant_name(a, tenant),
                       (int)(n > 128 ? 128 : n), model);
    return false;
}

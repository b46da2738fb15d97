/* config_tenants.c - the `auth` and `tenants` sections of the server
 * configuration (SPEC.md "Tenants and keys"): their schema rows, the checks
 * of one tenant, and the checks across tenants once the file is read.
 *
 * The file's tenants are read into t[1..] (the schema row in config.c) so
 * that t[0] can stay the tenant "default" whatever the file holds; a
 * configured "default" is then moved into t[0]. Messages name tenants by
 * their index in the file, as the schema's own messages do. */
#include "gateway/config_impl.h"

#include <stdio.h>
#include <string.h>

#include "common/sha256.h"

#define CONFIG_KEY_PREFIX "sha256:"
#define CONFIG_KEY_PREFIX_LEN 7
/* Shares are read from decimal text: 0.7 + 0.2 + 0.1 may sum to 1 + 1 ulp. */
#define CONFIG_SHARE_SLACK 1e-9

static int config_hex(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* "sha256:<64 hex>" into 32 bytes; -1 when it is not that. */
static int config_key_digest(const char *s, size_t len, uint8_t out[TENANT_DIGEST_LEN])
{
    if (len != CONFIG_KEY_PREFIX_LEN + 2 * TENANT_DIGEST_LEN ||
        memcmp(s, CONFIG_KEY_PREFIX, CONFIG_KEY_PREFIX_LEN) != 0)
        return -1;
    const char *h = s + CONFIG_KEY_PREFIX_LEN;
    for (int i = 0; i < TENANT_DIGEST_LEN; i++) {
        int hi = config_hex(h[2 * i]), lo = config_hex(h[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return -1;
        out[i] = (uint8_t)(hi << 4 | lo);
    }
    return 0;
}

/* `keys`: a list of digests. A value that is not one is never echoed in
 * the message: it may be the raw key pasted by mistake, and messages reach
 * logs. */
static int config_parse_keys(void *base, json_t *v, const struct schema_field *f,
                             struct schema_ctx *ctx)
{
    struct tenant_config *t = base;
    if (!v) {
        t->nkeys = 0;
        return 0;
    }
    if (!json_is_array(v) || json_array_size(v) > TENANT_KEYS_MAX)
        return schema_fail(ctx, NULL, "must be a list of at most %d keys, each \"sha256:<64 hex "
                           "digits>\" (`batchgate hash-key KEY` prints one)", TENANT_KEYS_MAX);
    size_t i;
    json_t *k;
    json_array_foreach(v, i, k) {
        char member[32];
        snprintf(member, sizeof member, "[%zu]", i);
        if (!json_is_string(k) ||
            config_key_digest(json_string_value(k), json_string_length(k), t->keys[i]) < 0)
            return schema_fail(ctx, member, "must be \"sha256:\" and 64 hex digits, the digest "
                               "that `batchgate hash-key KEY` prints (got %s %zu characters "
                               "long, not shown: the key itself must not be in the file)",
                               json_is_string(k) ? "a string" : "a value",
                               json_is_string(k) ? json_string_length(k) : 0);
    }
    t->nkeys = (int)json_array_size(v);
    return 0;
}

/* A name is a metrics label value, a log word and a jobs column: kept plain. */
static bool config_name_ok(const char *s)
{
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
              *s == '-' || *s == '_' || *s == '.'))
            return false;
    return true;
}

static int config_check_tenant(void *obj, json_t *json, struct schema_ctx *ctx)
{
    const struct tenant_config *t = obj;
    if (!config_name_ok(t->name))
        return schema_fail(ctx, "name", "\"%s\" may hold only letters, digits, '-', '_' and '.' "
                           "(it names the tenant in metrics, logs and jobs)", t->name);
    if (t->limit <= 0)   /* it read as "no limit" */
        return schema_fail(ctx, "limit", "0 would leave the tenant no device time at all: give "
                           "a part above 0, or leave limit out for the whole device");
    if (t->limit < t->share)
        return schema_fail(ctx, "limit", "%g is below share %g: a tenant may always hold at "
                           "least its guaranteed share", t->limit, t->share);
    return 0;
}

const struct schema_field config_auth_fields[] = {
    {SCHEMA_F_BOOL("required", struct tenants_config, auth_required),
     .def = false, .doc_default = "`true` once any tenant has `keys`, else `false`",
     .doc = "requests without a key, or with a key no tenant holds, are refused with 401 "
            "(`WWW-Authenticate: Bearer`) instead of running as the tenant `default`; "
            "docs/TENANTS.md"},
    SCHEMA_END_ROW,
};

static const struct schema_field config_glob = {.type = SCHEMA_STRING, .size = TENANT_GLOB_MAX,
                                                .flags = SCHEMA_NONEMPTY};

/* enum llm_priority's order (serving/llmpool.h), by SPEC's service_tier names. */
static const struct schema_name config_llm_priorities[] = {
    {"priority", 0}, {"default", 1}, {"flex", 2}, {NULL, 0},
};

static const struct schema_field config_tenant_fields[] = {
    {SCHEMA_F_STRING("name", struct tenant_config, name),
     .flags = SCHEMA_REQUIRED | SCHEMA_NONEMPTY,
     .doc = "letters, digits, `-`, `_`, `.`; unique; `default` configures the tenant of requests "
            "without a key"},
    {SCHEMA_F_CUSTOM("keys", config_parse_keys),
     .expect = "list of 0..16 `\"sha256:<64 hex>\"`", .doc_default = "`[]`",
     .doc = "digests of the tenant's API keys (`batchgate hash-key KEY` prints one); a key names "
            "one tenant only; SIGHUP puts the file's keys in force (docs/TENANTS.md, \"Rotating "
            "a key\")"},
    {SCHEMA_F_ARRAY("models", struct tenant_config, models, nmodels, &config_glob),
     .min = 1, .doc_default = "`[\"*\"]`",
     .doc = "glob patterns (fnmatch: `*`, `?`, `[...]`) of the models it may use; any other: 403. "
            "An empty list is refused: read as none given, it let the tenant use every model"},
    {SCHEMA_F_DOUBLE("share", struct tenant_config, share),
     .fmin = 0, .fmax = 1, .fdef = 0,
     .doc = "guaranteed fraction of each device it uses; the shares of all tenants add up to at "
            "most 1"},
    {SCHEMA_F_DOUBLE("limit", struct tenant_config, limit),
     .fmin = 0, .fmax = 1, .fdef = 1,
     .doc = "the most of a device it may hold when others are idle; above 0 and at least "
            "`share`"},
    {SCHEMA_F_BOOL("lend", struct tenant_config, lend),
     .def = true, .doc = "`false`: its idle share stays reserved for it"},
    {SCHEMA_F_INT("max_inflight", struct tenant_config, max_inflight),
     .min = 0, .max = 1 << 24, .def = 0,
     .doc = "inference requests in flight at once, all models together; past it: 429, "
            "`Retry-After: 1`; 0 = unlimited"},
    {SCHEMA_F_DOUBLE("rate_rows_per_s", struct tenant_config, rate_rows_per_s),
     .fmin = 0, .fmax = 1e9, .fdef = 0,
     .doc = "rows per second of inference, a token bucket holding one second's worth (at least "
            "one request); past it: 429 with the seconds until it holds the request's rows in "
            "`Retry-After`; 0 = unlimited"},
    {SCHEMA_F_INT64("tokens_per_minute", struct tenant_config, tokens_per_minute),
     .min = 0, .max = INT64_C(1) << 50, .def = 0,
     .doc = "LLM pools: prompt and completion tokens in any 60 s; a call reserves its estimate "
            "(prompt bytes / 4 + `max_tokens`, 256 when absent) until its usage is known; past "
            "it: 429 with the seconds until it fits in `Retry-After`; 0 = unlimited"},
    {SCHEMA_F_INT64("tokens_per_day", struct tenant_config, tokens_per_day),
     .min = 0, .max = INT64_C(1) << 50, .def = 0,
     .doc = "LLM pools: tokens per UTC day, counted like tokens_per_minute; past it: 429 "
            "with `x-should-retry: false` and the seconds to midnight UTC; both quotas continue "
            "across restarts from the usage ledger (docs/LLM.md \"Tokens\"); 0 = unlimited"},
    {SCHEMA_F_INT64("batch_tokens_per_day", struct tenant_config, batch_tokens_per_day),
     .min = 0, .max = INT64_C(1) << 50, .def = 0,
     .doc = "LLM pools' Batch API: its batch lines' tokens per UTC day (they count toward this, "
            "not toward tokens_per_day); once reached its batches send no more lines until "
            "midnight UTC (they stay `in_progress`, and expire at their completion window as "
            "any batch would); continues across restarts from the usage ledger; 0 = unlimited"},
    {SCHEMA_F_ENUM("llm_priority", struct tenant_config, llm_priority, config_llm_priorities),
     .sdef = "default",
     .doc = "LLM pools: its calls' priority when they name none (`X-Priority`, `service_tier`): "
            "`priority` (never shed), `default`, `flex` (shed first when a pool is saturated)"},
    {SCHEMA_F_BOOL("admin", struct tenant_config, admin),
     .def = false,
     .doc = "may use the admin routes (`/debug/...`, `PUT /v2/governance`, the repository) and "
            "see every tenant's jobs"},
    SCHEMA_END_ROW,
};

const struct schema_field config_tenant_item = {.type = SCHEMA_OBJECT,
                                                .fields = config_tenant_fields,
                                                .check = config_check_tenant};

void config_tenants_defaults(struct tenants_config *t)
{
    memset(&t->t[0], 0, sizeof t->t[0]);
    schema_defaults(config_tenant_fields, &t->t[0]);
    snprintf(t->t[0].name, sizeof t->t[0].name, "default");
    t->n = 1;
}

/* The file's index of t[i] while the file's tenants sit in t[1..]. */
#define FILE_IDX(i) ((i) - 1)

static int config_tenants_check_across(const struct tenants_config *t, int count,
                                       const char *file, struct error *err)
{
    double sum = 0;
    for (int i = 1; i <= count; i++) {
        sum += t->t[i].share;
        for (int k = 1; k < i; k++)
            if (strcmp(t->t[i].name, t->t[k].name) == 0)
                return error_set(err, BG_ECONFIG, "%s: tenants[%d].name: \"%s\" is also the name "
                                 "of tenants[%d]", file, FILE_IDX(i), t->t[i].name, FILE_IDX(k));
        for (int a = 0; a < t->t[i].nkeys; a++)
            for (int k = 1; k <= i; k++)
                for (int b = 0; b < (k == i ? a : t->t[k].nkeys); b++)
                    if (memcmp(t->t[i].keys[a], t->t[k].keys[b], TENANT_DIGEST_LEN) == 0)
                        return error_set(err, BG_ECONFIG, "%s: tenants[%d].keys[%d]: the same key "
                                         "as tenants[%d].keys[%d]; a key names one tenant",
                                         file, FILE_IDX(i), a, FILE_IDX(k), b);
    }
    if (sum > 1 + CONFIG_SHARE_SLACK) {
        char list[400];
        size_t len = 0;
        list[0] = '\0';
        for (int i = 1; i <= count && len < sizeof list; i++) {
            if (t->t[i].share <= 0)
                continue;
            int w = snprintf(list + len, sizeof list - len, "%s%s %g", len ? ", " : "",
                             t->t[i].name, t->t[i].share);
            len += w > 0 ? (size_t)w : 0;
        }
        return error_set(err, BG_ECONFIG, "%s: tenants: the shares add up to %g (%s); guaranteed "
                         "shares of one device can add up to 1 at most", file, sum, list);
    }
    return 0;
}

int config_tenants_finish(struct tenants_config *t, json_t *root, const char *file,
                          struct error *err)
{
    json_t *arr = json_object_get(root, "tenants");
    if (arr) {
        int count = t->n;   /* the schema counted the file's elements into n */
        int rc = config_tenants_check_across(t, count, file, err);
        if (rc)
            return rc;
        int d = 0;
        for (int i = 1; i <= count && !d; i++)
            if (strcmp(t->t[i].name, "default") == 0)
                d = i;
        if (d) {
            t->t[0] = t->t[d];
            memmove(&t->t[d], &t->t[d + 1], (size_t)(count - d) * sizeof t->t[0]);
            t->n = count;
        } else {
            t->n = count + 1;
        }
    }
    json_t *auth = json_object_get(root, "auth");
    if (!json_object_get(auth, "required")) {
        bool keys = false;
        for (int i = 0; i < t->n; i++)
            keys |= t->t[i].nkeys > 0;
        t->auth_required = keys;
    }
    return 0;
}

/* tenant.h - the tenants a server knows (SPEC.md "Tenants and keys"): who
 * may use which models with which keys, and the share of device time each
 * is guaranteed. The gateway parses them from the configuration (the
 * `auth` and `tenants` sections) and resolves each request's tenant; the
 * serving layer enforces the shares. Index 0 is always the tenant
 * `default`: requests without a key (unless auth.required) and everything
 * from before tenants existed. */
#ifndef BG_TENANT_H
#define BG_TENANT_H

#include <stdbool.h>
#include <stdint.h>

#include "batcher/work.h"

#define TENANTS_MAX WORK_TENANTS_MAX
#define TENANT_NAME_MAX 64
#define TENANT_KEYS_MAX 16
#define TENANT_MODELS_MAX 32
#define TENANT_GLOB_MAX 128
#define TENANT_DIGEST_LEN 32          /* SHA-256 */

struct tenant_config {
    char name[TENANT_NAME_MAX];
    /* Keys as SHA-256 digests of the key (configured as "sha256:<64 hex>"). */
    uint8_t keys[TENANT_KEYS_MAX][TENANT_DIGEST_LEN];
    int nkeys;
    char models[TENANT_MODELS_MAX][TENANT_GLOB_MAX];   /* glob patterns; none: every model */
    int nmodels;
    double share;                     /* guaranteed fraction of each device it uses */
    double limit;                     /* the most it may hold when others are idle */
    bool lend;                        /* false: its idle share stays reserved */
    int max_inflight;                 /* 0: unlimited */
    double rate_rows_per_s;           /* 0: unlimited */
    int64_t tokens_per_minute;        /* LLM pools' tokens, the last 60 s; 0: unlimited */
    int64_t tokens_per_day;           /* the same per UTC day; 0: unlimited */
    int64_t batch_tokens_per_day;     /* Batch API lines' tokens per UTC day; 0: unlimited */
    int llm_priority;                 /* its LLM calls' default: 0 priority, 1 default, 2 flex */
    bool admin;                       /* may use the admin routes */
};

struct tenants_config {
    bool auth_required;
    struct tenant_config t[TENANTS_MAX];   /* t[0] is "default" */
    int n;                            /* at least 1 */
};

/* Whether the tenant may use the model (its `models` globs; none: all). */
bool tenant_allows(const struct tenant_config *t, const char *model);
/* The index of the tenant of that name; -1 when none is (or tc is NULL). */
int tenants_find(const struct tenants_config *tc, const char *name);

#endif

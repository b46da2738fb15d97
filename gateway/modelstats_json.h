/* modelstats_json.h - a model's statistics as JSON: one object of
 * GET /v2/models/{m}/stats (Triton's statistics extension plus batchgate's
 * own fields, docs/METRICS.md), which /dashboard/data reuses. */
#ifndef BG_MODELSTATS_JSON_H
#define BG_MODELSTATS_JSON_H

struct buf;
struct served_model;

/* Appends sm's statistics object to out; its "tenants" rows all (tenant
 * -1: an admin's, the dashboard's) or only that tenant's own. */
void modelstats_json_append(struct buf *out, struct served_model *sm, int tenant);

#endif

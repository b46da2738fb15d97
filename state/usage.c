/* usage.c - the usage ledger's rows in the state database (state.h;
 * SPEC.md "Usage and cost"; docs/USAGE.md).
 *
 * Sized for a year: a key (tenant, model, class, device) is stored once in
 * usage_key and rows refer to it by number. Minute rows are integers
 * (microseconds, millionths of the currency, millijoules): SQLite stores a
 * small integer in 1 to 4 bytes where a REAL takes 8. After the minute
 * retention they become hour rows, and an hour's rows are packed into a
 * few blobs of varints (one per 16 keys, so no blob outgrows its page):
 * 10 tenants x 20 models of hourly rows for a year is ~40 MB where a row
 * per hour and key would be ~100 MB. held is not stored: it is busy + idle
 * by definition, so it is that exactly whatever the rounding. */
#include "state/state.h"
#include "state/state_impl.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

/* An hour blob holds the keys with the same id / USAGE_PART_KEYS. */
#define USAGE_PART_KEYS 16

static int usage_fail(struct error *err, sqlite3 *db, const char *what)
{
    return error_set(err, BG_EIO, "usage ledger: %s: %s", what, sqlite3_errmsg(db));
}

static int usage_exec(sqlite3 *db, const char *sql, struct error *err)
{
    char *msg = NULL;
    if (sqlite3_exec(db, sql, NULL, NULL, &msg) != SQLITE_OK) {
        int rc = error_set(err, BG_EIO, "usage ledger: %s", msg ? msg : "error");
        sqlite3_free(msg);
        return rc;
    }
    return 0;
}

static int64_t usage_round(double v) { return (int64_t)llround(v); }

/* ---- keys ---- */

/* The key's id, inserted when new (inside the caller's transaction). */
static int usage_key_id(sqlite3 *db, sqlite3_stmt *find, sqlite3_stmt *ins,
                        const struct state_usage_row *r, int64_t *id)
{
    sqlite3_stmt *both[2] = {find, ins};
    for (int k = 0; k < 2; k++) {
        sqlite3_stmt *s = both[k];
        sqlite3_bind_text(s, 1, r->tenant, -1, SQLITE_STATIC);
        sqlite3_bind_text(s, 2, r->model, -1, SQLITE_STATIC);
        sqlite3_bind_text(s, 3, r->cls, -1, SQLITE_STATIC);
        sqlite3_bind_text(s, 4, r->device, -1, SQLITE_STATIC);
        int rc = sqlite3_step(s);
        if (k == 0 && rc == SQLITE_ROW)
            *id = sqlite3_column_int64(s, 0);
        else if (k == 1 && rc == SQLITE_DONE)
            *id = sqlite3_last_insert_rowid(db);
        sqlite3_reset(s);
        if ((k == 0 && rc == SQLITE_ROW) || (k == 1 && rc == SQLITE_DONE))
            return 0;
        if (k == 1 || rc != SQLITE_DONE)
            return -1;
    }
    return -1;
}

int state_usage_add(struct state *st, const struct state_usage_row *rows, int n,
                    struct error *err)
{
    sqlite3 *db = state_db_usage(st);
    sqlite3_stmt *find = NULL, *ins = NULL, *add = NULL;
    int rc = usage_exec(db, "BEGIN IMMEDIATE", err);
    if (rc)
        return rc;
    if (sqlite3_prepare_v2(db, "SELECT id FROM usage_key WHERE tenant=? AND model=? AND class=?"
                               " AND device=?", -1, &find, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(db, "INSERT INTO usage_key (tenant, model, class, device)"
                               " VALUES (?,?,?,?)", -1, &ins, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(db,
                           "INSERT INTO usage_minute (start, key, requests, rows, busy_us,"
                           " idle_us, cost_micro, energy_mj) VALUES (?,?,?,?,?,?,?,?)"
                           " ON CONFLICT (start, key) DO UPDATE SET"
                           " requests = requests + excluded.requests,"
                           " rows = rows + excluded.rows, busy_us = busy_us + excluded.busy_us,"
                           " idle_us = idle_us + excluded.idle_us,"
                           " cost_micro = cost_micro + excluded.cost_micro,"
                           " energy_mj = energy_mj + excluded.energy_mj",
                           -1, &add, NULL) != SQLITE_OK) {
        rc = usage_fail(err, db, "prepare");
        goto out;
    }
    for (int i = 0; i < n && rc == 0; i++) {
        const struct state_usage_row *r = &rows[i];
        int64_t key;
        if (usage_key_id(db, find, ins, r, &key) < 0) {
            rc = usage_fail(err, db, "key");
            break;
        }
        sqlite3_bind_int64(add, 1, r->start / 60 * 60);
        sqlite3_bind_int64(add, 2, key);
        sqlite3_bind_int64(add, 3, r->requests);
        sqlite3_bind_int64(add, 4, r->rows);
        sqlite3_bind_int64(add, 5, usage_round(r->busy_s * 1e6));
        sqlite3_bind_int64(add, 6, usage_round(r->idle_s * 1e6));
        sqlite3_bind_int64(add, 7, usage_round(r->cost * 1e6));
        sqlite3_bind_int64(add, 8, usage_round(r->energy_j * 1e3));
        if (sqlite3_step(add) != SQLITE_DONE)
            rc = usage_fail(err, db, "insert");
        sqlite3_reset(add);
    }
out:
    sqlite3_finalize(find);
    sqlite3_finalize(ins);
    sqlite3_finalize(add);
    if (rc == 0)
        return usage_exec(db, "COMMIT", err);
    usage_exec(db, "ROLLBACK", &(struct error){0});
    return rc;
}

/* ---- hour blobs: per key, LEB128 varints of key, requests, rows, busy
 * and idle in ms, cost in millionths, energy in J; keys ascending ---- */

struct usage_entry {
    int64_t key, requests, rows, busy_ms, idle_ms, cost_micro, energy_j;
};
#define USAGE_ENTRY_FIELDS 7

static size_t usage_put(uint8_t *p, int64_t v)
{
    uint64_t u = v < 0 ? 0 : (uint64_t)v;   /* every field is a count or a duration */
    size_t n = 0;
    do {
        uint8_t b = u & 0x7f;
        u >>= 7;
        p[n++] = b | (u ? 0x80 : 0);
    } while (u);
    return n;
}

/* The entries of a blob into out (at most cap); how many, or -1 when it is
 * not one this file wrote. */
static int usage_decode(const uint8_t *p, int len, struct usage_entry *out, int cap)
{
    int n = 0, at = 0;
    while (at < len) {
        if (n == cap)
            return -1;
        int64_t *f = &out[n].key;
        for (int k = 0; k < USAGE_ENTRY_FIELDS; k++) {
            uint64_t v = 0;
            int shift = 0;
            for (;;) {
                if (at >= len || shift > 56)
                    return -1;
                uint8_t b = p[at++];
                v |= (uint64_t)(b & 0x7f) << shift;
                shift += 7;
                if (!(b & 0x80))
                    break;
            }
            f[k] = (int64_t)v;
        }
        n++;
    }
    return n;
}

static int usage_encode(const struct usage_entry *e, int n, uint8_t *out)
{
    int len = 0;
    for (int i = 0; i < n; i++) {
        const int64_t *f = &e[i].key;
        for (int k = 0; k < USAGE_ENTRY_FIELDS; k++)
            len += (int)usage_put(out + len, f[k]);
    }
    return len;
}

/* Writes one hour part: `add` (keys ascending) summed into what the part
 * already holds. */
static int usage_hour_merge(sqlite3 *db, sqlite3_stmt *get, sqlite3_stmt *put, int64_t hour,
                            int64_t part, const struct usage_entry *add, int nadd)
{
    struct usage_entry have[USAGE_PART_KEYS], merged[USAGE_PART_KEYS];
    int nhave = 0;
    sqlite3_bind_int64(get, 1, hour);
    sqlite3_bind_int64(get, 2, part);
    if (sqlite3_step(get) == SQLITE_ROW)
        nhave = usage_decode(sqlite3_column_blob(get, 0), sqlite3_column_bytes(get, 0), have,
                             USAGE_PART_KEYS);
    sqlite3_reset(get);
    if (nhave < 0)
        nhave = 0;   /* unreadable: replaced (it cannot be summed with) */
    int i = 0, j = 0, n = 0;
    while (i < nhave || j < nadd) {
        if (j == nadd || (i < nhave && have[i].key < add[j].key)) {
            merged[n++] = have[i++];
        } else if (i == nhave || add[j].key < have[i].key) {
            merged[n++] = add[j++];
        } else {
            struct usage_entry m = have[i++];
            const struct usage_entry *a = &add[j++];
            m.requests += a->requests;
            m.rows += a->rows;
            m.busy_ms += a->busy_ms;
            m.idle_ms += a->idle_ms;
            m.cost_micro += a->cost_micro;
            m.energy_j += a->energy_j;
            merged[n++] = m;
        }
    }
    uint8_t blob[USAGE_PART_KEYS * USAGE_ENTRY_FIELDS * 10];
    int len = usage_encode(merged, n, blob);
    (void)db;
    sqlite3_bind_int64(put, 1, hour);
    sqlite3_bind_int64(put, 2, part);
    sqlite3_bind_blob(put, 3, blob, len, SQLITE_STATIC);
    int rc = sqlite3_step(put) == SQLITE_DONE ? 0 : -1;
    sqlite3_reset(put);
    return rc;
}

int state_usage_rollup(struct state *st, int64_t minutes_before, int64_t hours_before,
                       struct error *err)
{
    sqlite3 *db = state_db_usage(st);
    sqlite3_stmt *sel = NULL, *get = NULL, *put = NULL;
    int rc = usage_exec(db, "BEGIN IMMEDIATE", err);
    if (rc)
        return rc;
    if (sqlite3_prepare_v2(db,
                           "SELECT start / 3600 * 3600 AS h, key, SUM(requests), SUM(rows),"
                           " SUM(busy_us), SUM(idle_us), SUM(cost_micro), SUM(energy_mj)"
                           " FROM usage_minute WHERE start < ?1 GROUP BY h, key ORDER BY h, key",
                           -1, &sel, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(db, "SELECT entries FROM usage_hour WHERE start = ? AND part = ?",
                           -1, &get, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(db, "INSERT OR REPLACE INTO usage_hour (start, part, entries)"
                               " VALUES (?,?,?)", -1, &put, NULL) != SQLITE_OK) {
        rc = usage_fail(err, db, "prepare");
        goto out;
    }
    sqlite3_bind_int64(sel, 1, minutes_before);
    struct usage_entry pend[USAGE_PART_KEYS];
    int npend = 0;
    int64_t phour = 0, ppart = 0;
    int step;
    while ((step = sqlite3_step(sel)) == SQLITE_ROW || npend) {
        bool row = step == SQLITE_ROW;
        int64_t h = row ? sqlite3_column_int64(sel, 0) : 0;
        int64_t key = row ? sqlite3_column_int64(sel, 1) : 0;
        if (npend && (!row || h != phour || key / USAGE_PART_KEYS != ppart)) {
            if (usage_hour_merge(db, get, put, phour, ppart, pend, npend) < 0) {
                rc = usage_fail(err, db, "hour row");
                goto out;
            }
            npend = 0;
        }
        if (!row)
            break;
        phour = h;
        ppart = key / USAGE_PART_KEYS;
        pend[npend++] = (struct usage_entry){
            .key = key,
            .requests = sqlite3_column_int64(sel, 2),
            .rows = sqlite3_column_int64(sel, 3),
            .busy_ms = usage_round((double)sqlite3_column_int64(sel, 4) / 1e3),
            .idle_ms = usage_round((double)sqlite3_column_int64(sel, 5) / 1e3),
            .cost_micro = sqlite3_column_int64(sel, 6),
            .energy_j = usage_round((double)sqlite3_column_int64(sel, 7) / 1e3),
        };
    }
    if (step != SQLITE_DONE && step != SQLITE_ROW) {
        rc = usage_fail(err, db, "rollup");
        goto out;
    }
    sqlite3_finalize(sel);
    sel = NULL;
    char sql[200];
    snprintf(sql, sizeof sql,
             "DELETE FROM usage_minute WHERE start < %lld; DELETE FROM usage_hour WHERE start < %lld;",
             (long long)minutes_before, (long long)hours_before);
    rc = usage_exec(db, sql, err);
out:
    sqlite3_finalize(sel);
    sqlite3_finalize(get);
    sqlite3_finalize(put);
    if (rc == 0)
        return usage_exec(db, "COMMIT", err);
    usage_exec(db, "ROLLBACK", &(struct error){0});
    return rc;
}

/* ---- queries: summed in memory by (period, group) ---- */

struct usage_key {
    char tenant[64], model[128], cls[16], device[128];
    int group;                        /* -1: filtered out (another tenant's) */
};

struct usage_cell {
    int64_t period;
    int group;
    int64_t requests, rows;
    double busy_s, idle_s, cost, energy_j;
};

struct usage_sum {
    struct usage_key *keys;           /* by id */
    int64_t nkeys;
    int *rep;                         /* a key id of each group */
    int ngroups;
    struct usage_cell *cells;
    size_t ncells, cap;               /* open addressing, cap a power of two */
    int64_t from, step;
    int by;
    /* Rows come in start order: the cells of the period last added to, by
     * group (SIZE_MAX: not looked up yet), spare most hash lookups. */
    int64_t memo_period;
    size_t *memo;
};

static void usage_cell_sum(struct usage_cell *c, const struct usage_cell *v)
{
    c->requests += v->requests;
    c->rows += v->rows;
    c->busy_s += v->busy_s;
    c->idle_s += v->idle_s;
    c->cost += v->cost;
    c->energy_j += v->energy_j;
}

static int usage_cell_add(struct usage_sum *u, int64_t start, int64_t key,
                          const struct usage_cell *v)
{
    if (key < 0 || key >= u->nkeys || u->keys[key].group < 0)
        return 0;
    int64_t period = (start - u->from) / u->step;
    int group = u->keys[key].group;
    if (period != u->memo_period) {
        memset(u->memo, 0xff, (size_t)u->ngroups * sizeof *u->memo);
        u->memo_period = period;
    }
    if (u->memo[group] != SIZE_MAX) {
        usage_cell_sum(&u->cells[u->memo[group]], v);
        return 0;
    }
    if ((u->ncells + 1) * 2 > u->cap) {
        size_t ncap = u->cap ? u->cap * 2 : 1024;
        struct usage_cell *nc = malloc(ncap * sizeof *nc);
        if (!nc)
            return -1;
        for (size_t i = 0; i < ncap; i++)
            nc[i].group = -1;
        for (size_t i = 0; i < u->cap; i++) {
            if (u->cells[i].group < 0)
                continue;
            size_t h = ((uint64_t)u->cells[i].period * 0x9E3779B97F4A7C15ULL ^
                        (uint64_t)u->cells[i].group * 0xC2B2AE3D27D4EB4FULL) & (ncap - 1);
            while (nc[h].group >= 0)
                h = (h + 1) & (ncap - 1);
            nc[h] = u->cells[i];
        }
        free(u->cells);
        u->cells = nc;
        u->cap = ncap;
        memset(u->memo, 0xff, (size_t)u->ngroups * sizeof *u->memo);   /* cells moved */
    }
    size_t h = ((uint64_t)period * 0x9E3779B97F4A7C15ULL ^
                (uint64_t)group * 0xC2B2AE3D27D4EB4FULL) & (u->cap - 1);
    while (u->cells[h].group >= 0 &&
           (u->cells[h].period != period || u->cells[h].group != group))
        h = (h + 1) & (u->cap - 1);
    struct usage_cell *c = &u->cells[h];
    if (c->group < 0) {
        *c = (struct usage_cell){.period = period, .group = group};
        u->ncells++;
    }
    u->memo[group] = h;
    usage_cell_sum(c, v);
    return 0;
}

/* Keys compare by the fields grouped by. */
static int usage_key_cmp(const struct usage_key *a, const struct usage_key *b, int by)
{
    int c = 0;
    if (!c && (by & STATE_USAGE_BY_TENANT))
        c = strcmp(a->tenant, b->tenant);
    if (!c && (by & STATE_USAGE_BY_MODEL))
        c = strcmp(a->model, b->model);
    if (!c && (by & STATE_USAGE_BY_CLASS))
        c = strcmp(a->cls, b->cls);
    if (!c && (by & STATE_USAGE_BY_DEVICE))
        c = strcmp(a->device, b->device);
    return c;
}

static int usage_id_cmp(const void *x, const void *y, void *arg)
{
    const struct usage_sum *u = arg;
    return usage_key_cmp(&u->keys[*(const int *)x], &u->keys[*(const int *)y], u->by);
}

static int usage_cell_cmp(const void *x, const void *y)
{
    const struct usage_cell *a = x, *b = y;
    if (a->period != b->period)
        return a->period < b->period ? -1 : 1;
    return (a->group > b->group) - (a->group < b->group);
}

/* Reads the keys and numbers the groups in sort order (so a cell's group
 * orders its rows). */
static int usage_load_keys(sqlite3 *db, struct usage_sum *u, const char *tenant)
{
    sqlite3_stmt *s = NULL;
    if (sqlite3_prepare_v2(db, "SELECT COALESCE(MAX(id), 0) FROM usage_key", -1, &s, NULL) !=
            SQLITE_OK || sqlite3_step(s) != SQLITE_ROW) {
        sqlite3_finalize(s);
        return -1;
    }
    u->nkeys = sqlite3_column_int64(s, 0) + 1;
    sqlite3_finalize(s);
    u->keys = calloc((size_t)u->nkeys, sizeof *u->keys);
    int *ids = malloc((size_t)u->nkeys * sizeof *ids);
    u->rep = malloc((size_t)u->nkeys * sizeof *u->rep);
    if (!u->keys || !ids || !u->rep) {
        free(ids);
        return -1;
    }
    for (int64_t i = 0; i < u->nkeys; i++)
        u->keys[i].group = -1;
    if (sqlite3_prepare_v2(db, "SELECT id, tenant, model, class, device FROM usage_key", -1, &s,
                           NULL) != SQLITE_OK) {
        free(ids);
        return -1;
    }
    int n = 0;
    while (sqlite3_step(s) == SQLITE_ROW) {
        int64_t id = sqlite3_column_int64(s, 0);
        if (id < 0 || id >= u->nkeys)
            continue;
        struct usage_key *k = &u->keys[id];
        snprintf(k->tenant, sizeof k->tenant, "%s", (const char *)sqlite3_column_text(s, 1));
        snprintf(k->model, sizeof k->model, "%s", (const char *)sqlite3_column_text(s, 2));
        snprintf(k->cls, sizeof k->cls, "%s", (const char *)sqlite3_column_text(s, 3));
        snprintf(k->device, sizeof k->device, "%s", (const char *)sqlite3_column_text(s, 4));
        if (!tenant || strcmp(k->tenant, tenant) == 0)
            ids[n++] = (int)id;
    }
    sqlite3_finalize(s);
    qsort_r(ids, (size_t)n, sizeof *ids, usage_id_cmp, u);
    int g = -1;
    for (int i = 0; i < n; i++) {
        if (i == 0 || usage_key_cmp(&u->keys[ids[i]], &u->keys[ids[i - 1]], u->by) != 0)
            u->rep[++g] = ids[i];
        u->keys[ids[i]].group = g;
    }
    free(ids);
    u->ngroups = g + 1;
    u->memo_period = -1;
    u->memo = malloc((size_t)(u->ngroups ? u->ngroups : 1) * sizeof *u->memo);
    if (!u->memo)
        return -1;
    memset(u->memo, 0xff, (size_t)(u->ngroups ? u->ngroups : 1) * sizeof *u->memo);
    return 0;
}

static int usage_sum_rows(sqlite3 *db, struct usage_sum *u, int64_t to)
{
    sqlite3_stmt *s = NULL;
    int rc = 0;
    if (sqlite3_prepare_v2(db,
                           "SELECT start, key, requests, rows, busy_us, idle_us, cost_micro,"
                           " energy_mj FROM usage_minute WHERE start >= ? AND start < ?",
                           -1, &s, NULL) != SQLITE_OK)
        return -1;
    sqlite3_bind_int64(s, 1, u->from);
    sqlite3_bind_int64(s, 2, to);
    while (rc == 0 && sqlite3_step(s) == SQLITE_ROW) {
        struct usage_cell v = {
            .requests = sqlite3_column_int64(s, 2),
            .rows = sqlite3_column_int64(s, 3),
            .busy_s = (double)sqlite3_column_int64(s, 4) / 1e6,
            .idle_s = (double)sqlite3_column_int64(s, 5) / 1e6,
            .cost = (double)sqlite3_column_int64(s, 6) / 1e6,
            .energy_j = (double)sqlite3_column_int64(s, 7) / 1e3,
        };
        rc = usage_cell_add(u, sqlite3_column_int64(s, 0), sqlite3_column_int64(s, 1), &v);
    }
    sqlite3_finalize(s);
    if (rc || sqlite3_prepare_v2(db, "SELECT start, entries FROM usage_hour"
                                     " WHERE start >= ? AND start < ?", -1, &s, NULL) != SQLITE_OK)
        return -1;
    sqlite3_bind_int64(s, 1, u->from);
    sqlite3_bind_int64(s, 2, to);
    struct usage_entry e[USAGE_PART_KEYS];
    while (rc == 0 && sqlite3_step(s) == SQLITE_ROW) {
        int n = usage_decode(sqlite3_column_blob(s, 1), sqlite3_column_bytes(s, 1), e,
                             USAGE_PART_KEYS);
        for (int i = 0; i < n && rc == 0; i++) {
            struct usage_cell v = {
                .requests = e[i].requests,
                .rows = e[i].rows,
                .busy_s = (double)e[i].busy_ms / 1e3,
                .idle_s = (double)e[i].idle_ms / 1e3,
                .cost = (double)e[i].cost_micro / 1e6,
                .energy_j = (double)e[i].energy_j,
            };
            rc = usage_cell_add(u, sqlite3_column_int64(s, 0), e[i].key, &v);
        }
    }
    sqlite3_finalize(s);
    return rc;
}

int state_usage_query(struct state *st, int64_t from, int64_t to, int64_t step, int group_by,
                      const char *tenant, state_usage_fn fn, void *arg, struct error *err)
{
    if (step <= 0 || to <= from)
        return error_set(err, BG_EINVAL, "usage ledger: a period needs to > from and step > 0");
    struct usage_sum u = {.from = from, .step = step, .by = group_by};
    pthread_mutex_t *mu;
    sqlite3 *db = state_db_reader(st, &mu);
    pthread_mutex_lock(mu);
    /* One read transaction: the keys and the rows from the same snapshot. */
    int rc = usage_exec(db, "BEGIN", err);
    if (rc == 0 && (usage_load_keys(db, &u, tenant) < 0 || usage_sum_rows(db, &u, to) < 0))
        rc = usage_fail(err, db, "query");
    usage_exec(db, rc ? "ROLLBACK" : "COMMIT", &(struct error){0});
    pthread_mutex_unlock(mu);
    if (rc == 0) {
        size_t n = 0;
        for (size_t i = 0; i < u.cap; i++)
            if (u.cells[i].group >= 0)
                u.cells[n++] = u.cells[i];
        if (n > 1)   /* with none, cells may be NULL, which qsort may not be given */
            qsort(u.cells, n, sizeof *u.cells, usage_cell_cmp);
        for (size_t i = 0; i < n; i++) {
            const struct usage_cell *c = &u.cells[i];
            const struct usage_key *k = &u.keys[u.rep[c->group]];
            struct state_usage_row r = {
                .start = from + c->period * step,
                .requests = c->requests,
                .rows = c->rows,
                .busy_s = c->busy_s,
                .idle_s = c->idle_s,
                .held_s = c->busy_s + c->idle_s,
                .cost = c->cost,
                .energy_j = c->energy_j,
            };
            if (group_by & STATE_USAGE_BY_TENANT)
                snprintf(r.tenant, sizeof r.tenant, "%s", k->tenant);
            if (group_by & STATE_USAGE_BY_MODEL)
                snprintf(r.model, sizeof r.model, "%s", k->model);
            if (group_by & STATE_USAGE_BY_CLASS)
                snprintf(r.cls, sizeof r.cls, "%s", k->cls);
            if (group_by & STATE_USAGE_BY_DEVICE)
                snprintf(r.device, sizeof r.device, "%s", k->device);
            fn(&r, arg);
        }
    }
    free(u.cells);
    free(u.keys);
    free(u.rep);
    free(u.memo);
    return rc;
}

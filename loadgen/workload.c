/* workload.c - see workload.h. */
#include "loadgen/workload.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool lg_workload_name_ok(const char *s, size_t n)
{
    if (n == 0)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
              (s[i] >= '0' && s[i] <= '9') || s[i] == '-' || s[i] == '_' || s[i] == '.'))
            return false;
    return true;
}

/* A whole number or decimal in v (not empty, nothing after). */
static int lg_workload_number(const char *v, double *out)
{
    char *end;
    *out = strtod(v, &end);
    return v[0] && !*end ? 0 : -1;
}

int lg_workload_parse(const char *spec, struct lg_workload *w, char *msg, int cap)
{
    memset(w, 0, sizeof *w);
    w->budget_ms = -1;
    w->priority = -1;
    const char *colon = strchr(spec, ':');
    size_t nlen = colon ? (size_t)(colon - spec) : strlen(spec);
    if (!lg_workload_name_ok(spec, nlen) || nlen >= sizeof w->name) {
        snprintf(msg, (size_t)cap, "--workload: \"%.*s\" is not a name (letters, digits, - _ .; "
                 "at most %zu) before ':'", (int)(nlen > 64 ? 64 : nlen), spec,
                 sizeof w->name - 1);
        return -1;
    }
    memcpy(w->name, spec, nlen);
    char *copy = strdup(colon ? colon + 1 : "");
    if (!copy) {
        snprintf(msg, (size_t)cap, "out of memory");
        return -1;
    }
    int rc = 0, modes = 0;
    char *save = NULL;
    for (char *tok = strtok_r(copy, ",", &save); tok && rc == 0; tok = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(tok, '=');
        if (!eq) {
            snprintf(msg, (size_t)cap, "--workload %s: \"%.40s\" is not NAME=VALUE", w->name,
                     tok);
            rc = -1;
            break;
        }
        *eq = '\0';
        const char *k = tok, *v = eq + 1;
        double x;
        if (strcmp(k, "key") == 0) {
            if (!v[0] || strlen(v) >= sizeof w->key) {
                snprintf(msg, (size_t)cap, "--workload %s: key: 1 to %zu characters", w->name,
                         sizeof w->key - 1);
                rc = -1;
            } else {
                snprintf(w->key, sizeof w->key, "%s", v);
            }
        } else if (strcmp(k, "model") == 0) {
            if (!v[0] || strlen(v) >= sizeof w->model) {
                snprintf(msg, (size_t)cap, "--workload %s: model: a model name", w->name);
                rc = -1;
            } else {
                snprintf(w->model, sizeof w->model, "%s", v);
            }
        } else if (strcmp(k, "rate") == 0 || strcmp(k, "concurrency") == 0) {
            bool open = k[0] == 'r';
            modes++;
            if (lg_workload_number(v, &x) < 0 || x <= 0 || (!open && x != (int)x)) {
                snprintf(msg, (size_t)cap, "--workload %s: %s: %s, got \"%.20s\"", w->name, k,
                         open ? "requests per second > 0" : "a whole number of connections >= 1",
                         v);
                rc = -1;
            }
            w->open_loop = open;
            w->target = x;
        } else if (strcmp(k, "batch") == 0) {
            if (lg_workload_number(v, &x) < 0 || x < 1 || x != (int)x || x > 1 << 20) {
                snprintf(msg, (size_t)cap, "--workload %s: batch: rows per request >= 1",
                         w->name);
                rc = -1;
            }
            w->batch = (int)x;
        } else if (strcmp(k, "budget-ms") == 0) {
            if (lg_workload_number(v, &x) < 0 || x < 0) {
                snprintf(msg, (size_t)cap, "--workload %s: budget-ms: milliseconds >= 0",
                         w->name);
                rc = -1;
            }
            w->budget_ms = x;
        } else if (strcmp(k, "priority") == 0) {
            if (lg_workload_number(v, &x) < 0 || x < 0 || x != (int)x || x > 1000000) {
                snprintf(msg, (size_t)cap, "--workload %s: priority: a whole number >= 0",
                         w->name);
                rc = -1;
            }
            w->priority = (int)x;
        } else {
            snprintf(msg, (size_t)cap, "--workload %s: unknown \"%.40s\" (known: key, model, "
                     "rate, concurrency, batch, budget-ms, priority)", w->name, k);
            rc = -1;
        }
    }
    free(copy);
    if (rc == 0 && modes != 1) {
        snprintf(msg, (size_t)cap, "--workload %s: give one of rate=R or concurrency=C", w->name);
        rc = -1;
    }
    return rc;
}

/* workload.c - see workload.h. */
#include "loadgen/workload.h"

#include <pthread.h>
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

/* A finite number in v (not empty, nothing after); ranges are the caller's. */
static int lg_workload_number(const char *v, double *out)
{
    return lg_parse_number(v, -1e300, 1e300, false, out);
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
            if (lg_workload_number(v, &x) < 0 || x <= 0 || x > (open ? 1e6 : 100000) ||
                (!open && x != (int)x)) {
                snprintf(msg, (size_t)cap, "--workload %s: %s: %s, got \"%.20s\"", w->name, k,
                         open ? "requests per second > 0, up to 1000000"
                              : "a whole number of connections from 1 to 100000",
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

/* ---- running them ---- */

struct lg_workload_run {
    const struct lg_workload *w;
    const char *model;
    struct lg_request reqs[LG_NREQ];
    int nreq;
    struct lg_config c;
    struct report_step st;
    struct lg_server_view before, after;
    char msg[1024];
    int rc;
};

static void *lg_workload_main(void *arg)
{
    struct lg_workload_run *r = arg;
    r->rc = lg_run_step(&r->c, &r->st.r, r->msg, (int)sizeof r->msg);
    return NULL;
}

/* The total of the workloads' results: counts and rates add up, latencies
 * merge. Every count of lg_result is here but `llm` (--openai takes no
 * --workload). */
static void lg_workload_total(const struct lg_workload_run *runs, int n, struct report_step *t)
{
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "total");
    hist_reset(&t->r.latency);
    t->open_loop = runs[0].st.open_loop;
    for (int i = 0; i < n; i++) {
        const struct lg_result *r = &runs[i].st.r;
        t->mixed |= runs[i].st.open_loop != t->open_loop;
        t->target += runs[i].st.target;
        hist_merge(&t->r.latency, &r->latency);
        for (int c = 0; c < 600; c++)
            t->r.codes[c] += r->codes[c];
        t->r.errors += r->errors;
        t->r.refused += r->refused;
        t->r.lost += r->lost;
        t->r.closed_idle += r->closed_idle;
        t->r.unsent += r->unsent;
        t->r.sent += r->sent;
        t->r.answered += r->answered;
        t->r.good += r->good;
        t->r.late_sends += r->late_sends;
        t->r.achieved_rate += r->achieved_rate;
        t->r.throughput += r->throughput;
        t->r.goodput += r->goodput;
        t->r.connections += r->connections;
        t->r.duration_s = r->duration_s;
        /* Rates add up (each over its own span); the total's span is the
         * longest, as the JSON says. */
        if (r->span_s > t->r.span_s)
            t->r.span_s = r->span_s;
    }
}

/* The server's view is per model: a workload shows it when it alone drove
 * its model, the total when every workload drove the same one. */
static int lg_workload_alone(const struct lg_workload_run *runs, int n, int i)
{
    for (int k = 0; k < n; k++)
        if (k != i && runs[i].model && runs[k].model && strcmp(runs[i].model, runs[k].model) == 0)
            return 0;
    return 1;
}

int lg_workload_run(struct lg_opts *o, const struct lg_workload *wl, int nwl)
{
    struct lg_workload_run *runs = calloc((size_t)nwl, sizeof *runs);
    if (!runs) {
        fprintf(stderr, "batchgate-load: out of memory\n");
        return 1;
    }
    int rc = 0;
    for (int i = 0; i < nwl && rc == 0; i++) {
        struct lg_workload_run *r = &runs[i];
        const struct lg_workload *w = &wl[i];
        r->w = w;
        r->model = w->model[0] ? w->model : o->model;
        double budget = w->budget_ms >= 0 ? w->budget_ms : o->budget_ms;
        const char *key = w->key[0] ? w->key : o->api_key;
        uint64_t seed = o->seed + 7919 * (uint64_t)i;   /* workloads do not arrive in step */
        if (lg_target_requests(o, r->model, w->batch ? w->batch : o->batch, budget,
                           w->priority >= 0 ? w->priority : o->priority, key, seed, r->reqs,
                           &r->nreq, r->msg, (int)sizeof r->msg) < 0) {
            fprintf(stderr, "batchgate-load: workload %s: %s\n", w->name, r->msg);
            rc = 1;
            break;
        }
        r->c = lg_target_step(o, r->reqs, r->nreq, w->open_loop, w->target, budget, seed);
        r->c.progress = false;   /* one line per workload would interleave */
        snprintf(r->st.name, sizeof r->st.name, "%.63s", w->name);
        r->st.open_loop = w->open_loop;
        r->st.target = w->target;
    }
    pthread_t *th = rc == 0 ? calloc((size_t)nwl, sizeof *th) : NULL;
    if (rc == 0 && !th)
        rc = 1;
    if (rc == 0) {
        for (int i = 0; i < nwl; i++)
            lg_target_view_read(&o->t, runs[i].model, &runs[i].before);
        int started = 0;
        for (; started < nwl; started++)
            if (pthread_create(&th[started], NULL, lg_workload_main, &runs[started]) != 0) {
                fprintf(stderr, "batchgate-load: cannot start a thread for workload %s\n",
                        runs[started].w->name);
                rc = 1;
                break;
            }
        for (int i = 0; i < started; i++)
            pthread_join(th[i], NULL);
        for (int i = 0; i < nwl; i++)
            lg_target_view_read(&o->t, runs[i].model, &runs[i].after);
    }
    free(th);
    if (rc == 0) {
        struct report_step *steps = calloc((size_t)nwl + 1, sizeof *steps);
        if (!steps) {
            rc = 1;
        } else {
            bool same_model = true;
            report_table_header(stdout, runs[0].st.open_loop, true);
            for (int i = 0; i < nwl; i++) {
                struct lg_workload_run *r = &runs[i];
                if (r->rc < 0) {
                    fprintf(stderr, "batchgate-load: workload %s: %s\n", r->w->name, r->msg);
                    rc = 1;
                }
                if (lg_workload_alone(runs, nwl, i))
                    lg_target_view_apply(&r->before, &r->after, &r->st);
                same_model &= r->model && runs[0].model && strcmp(r->model, runs[0].model) == 0;
                report_table_row(stdout, &r->st);
                report_warn_late(&r->st, r->st.target);
                steps[i] = r->st;
            }
            struct report_step *total = &steps[nwl];
            lg_workload_total(runs, nwl, total);
            if (same_model)
                lg_target_view_apply(&runs[0].before, &runs[0].after, total);
            report_table_row(stdout, total);
            if (o->json_path && report_json_workloads(o->json_path, total, steps, nwl) < 0)
                fprintf(stderr, "batchgate-load: cannot write %s\n", o->json_path), rc = 1;
            if (o->csv_path && report_csv(o->csv_path, steps, nwl + 1) < 0)
                fprintf(stderr, "batchgate-load: cannot write %s\n", o->csv_path), rc = 1;
            if (o->svg_path && report_svg(o->svg_path, steps, nwl + 1, o->url) < 0)
                fprintf(stderr, "batchgate-load: cannot write %s\n", o->svg_path), rc = 1;
            free(steps);
        }
    }
    for (int i = 0; i < nwl; i++)
        for (int k = 0; k < LG_NREQ; k++)
            buf_free(&runs[i].reqs[k].bytes);
    free(runs);
    return rc;
}

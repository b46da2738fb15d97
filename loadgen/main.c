/* main.c - batchgate-load: the load generator and benchmark harness.
 *
 *   batchgate-load --url URL --model NAME [--rate R[,R2,...] | --concurrency C[,C2,...]]
 *                  [--duration S] [--warmup S] [--batch ROWS] [--json F] [--csv F] [--svg F]
 *   batchgate-load --url URL --model NAME --workload NAME:key=K,rate=R [--workload ...]
 *
 * With --model it sends KServe v2 infer requests with random inputs of the
 * model's shape (read from GET /v2/models/{m}); without it, it requests the
 * URL as it is (GET, or --method M --body FILE), for any HTTP server. A list
 * of rates or concurrencies is a sweep, one step each. Several --workload
 * run side by side for one window (a thread each), each reported apart and
 * then in total: several tenants' traffic at once. */
#include <errno.h>
#include <getopt.h>
#include <netdb.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <jansson.h>

#include "common/buf.h"
#include "loadgen/engine.h"
#include "loadgen/report.h"
#include "loadgen/workload.h"

#define EXIT_USAGE 2
#define MAX_STEPS 64

static void usage(FILE *out)
{
    fprintf(out,
        "usage: batchgate-load --url URL [--model NAME] [--rate R[,R2,...] | --concurrency C[,C2,...]]\n"
        "                      [--duration SECONDS] [--warmup SECONDS] [--batch ROWS]\n"
        "                      [--json FILE] [--csv FILE] [--svg FILE]\n"
        "\n"
        "Open loop (--rate, requests/s, Poisson arrivals unless --constant): latency is\n"
        "measured from each request's intended send time, so a stalled server shows up\n"
        "in the tail. Closed loop (--concurrency): C connections, each sending its next\n"
        "request when the previous answer arrives. A list is a sweep: one step each.\n"
        "\n"
        "  --url URL            http://HOST:PORT[/PATH]\n"
        "  --model NAME         KServe v2 infer on NAME with random inputs of its shape\n"
        "  --batch ROWS         rows per infer request (default 1)\n"
        "  --binary             with --model: Triton's binary tensor extension both ways\n"
        "  --method M, --body FILE   without --model: the request to send (default GET)\n"
        "  --header 'N: V'      an extra request header (repeatable)\n"
        "  --api-key KEY        sent as Authorization: Bearer KEY (model metadata too)\n"
        "  --workload NAME:key=K,rate=R|concurrency=C[,model=M,batch=B,budget-ms=MS,priority=P]\n"
        "                       one of several workloads run at once for one window, each\n"
        "                       reported apart, then the total (repeatable, up to 16); what\n"
        "                       a workload does not set comes from the flags above\n"
        "  --budget-ms MS       goodput counts answers within MS; with --model also sent\n"
        "                       as X-Request-Timeout-Ms\n"
        "  --priority P         with --model: sent as X-Priority\n"
        "  --duration S         measurement window per step (default 10)\n"
        "  --warmup S           warmup before each window, not measured (default 2)\n"
        "  --constant           constant gaps instead of Poisson arrivals\n"
        "  --trace diurnal:PERIOD_S:PEAK:TROUGH\n"
        "                       open loop, one step: the rate follows a compressed day,\n"
        "                       TROUGH requests/s at the window's start, PEAK half a period\n"
        "                       later, (1 - cos)/2 between; --duration sets the length\n"
        "  --connections N      open loop: at most N connections (default 1024)\n"
        "  --drain-ms MS        after a window, wait this long for answers (default 10000)\n"
        "  --seed N             arrivals and inputs (default 1)\n"
        "  --json F, --csv F, --svg F   write the steps (SVG: latency vs throughput)\n"
        "  --quiet              no progress line\n"
        "\n"
        "Exit status: 0 success, 1 runtime failure, 2 bad usage.\n");
}

struct target {
    char host[256];
    int port;
    char path[2048];
};

static int parse_url(const char *url, struct target *t)
{
    if (strncmp(url, "http://", 7) != 0)
        return -1;
    const char *p = url + 7, *slash = strchr(p, '/');
    size_t hl = slash ? (size_t)(slash - p) : strlen(p);
    char hostport[250];
    if (hl == 0 || hl >= sizeof hostport)
        return -1;
    memcpy(hostport, p, hl);
    hostport[hl] = '\0';
    snprintf(t->path, sizeof t->path, "%s", slash ? slash : "/");
    t->port = 80;
    char *colon = strrchr(hostport, ':');
    if (hostport[0] == '[') {
        char *end = strchr(hostport, ']');
        if (!end)
            return -1;
        *end = '\0';
        snprintf(t->host, sizeof t->host, "%s", hostport + 1);
        if (end[1] == ':')
            t->port = atoi(end + 2);
    } else {
        if (colon) {
            *colon = '\0';
            t->port = atoi(colon + 1);
        }
        snprintf(t->host, sizeof t->host, "%s", hostport);
    }
    return t->port > 0 && t->port < 65536 ? 0 : -1;
}

/* A blocking GET (model metadata, /metrics) with `extra` header lines
 * ("N: V\r\n"...): the body, or NULL. */
static char *http_get(const struct target *t, const char *path, const char *extra, int *status)
{
    char port[16];
    snprintf(port, sizeof port, "%d", t->port);
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai;
    if (getaddrinfo(t->host, port, &hints, &ai))
        return NULL;
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct timeval tv = {10, 0};
    if (fd >= 0) {
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    }
    if (fd < 0 || connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
        freeaddrinfo(ai);
        if (fd >= 0)
            close(fd);
        return NULL;
    }
    freeaddrinfo(ai);
    struct buf b = BUF_INIT;
    buf_appendf(&b, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n%s\r\n", path, t->host,
                extra ? extra : "");
    if (send(fd, b.data, b.len, MSG_NOSIGNAL) != (ssize_t)b.len) {
        close(fd);
        buf_free(&b);
        return NULL;
    }
    buf_reset(&b);
    for (;;) {
        if (buf_reserve(&b, 65536) < 0)
            break;
        ssize_t n = read(fd, b.data + b.len, b.cap - b.len - 1);
        if (n <= 0)
            break;
        b.len += (size_t)n;
    }
    close(fd);
    if (!b.data) {
        return NULL;
    }
    b.data[b.len] = '\0';
    *status = 0;
    sscanf(b.data, "HTTP/%*s %d", status);
    char *body = strstr(b.data, "\r\n\r\n");
    char *out = body ? strdup(body + 4) : NULL;
    buf_free(&b);
    return out;
}

static uint64_t rnd(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* KServe v2 infer bodies of random FP32 rows of the model's input shape. */
static int build_model_requests(const struct target *t, const char *model, int batch,
                                bool binary, const char *extra, uint64_t seed,
                                struct lg_request *out, int n, char *msg, int cap)
{
    char path[512];
    snprintf(path, sizeof path, "/v2/models/%s", model);
    int status = 0;
    char *meta = http_get(t, path, extra, &status);
    if (!meta || status != 200) {
        snprintf(msg, (size_t)cap, "GET http://%s:%d%s: %s", t->host, t->port, path,
                 meta ? meta : "no answer");
        free(meta);
        return -1;
    }
    json_t *root = json_loads(meta, 0, NULL);
    free(meta);
    json_t *in = root ? json_array_get(json_object_get(root, "inputs"), 0) : NULL;
    json_t *shape = in ? json_object_get(in, "shape") : NULL;
    const char *name = in ? json_string_value(json_object_get(in, "name")) : NULL;
    const char *dt = in ? json_string_value(json_object_get(in, "datatype")) : NULL;
    if (!name || !json_is_array(shape) || !dt || strcmp(dt, "FP32") != 0) {
        snprintf(msg, (size_t)cap, "model %s: metadata without an FP32 input (only FP32 is generated)",
                 model);
        json_decref(root);
        return -1;
    }
    long long elems = 1;
    struct buf sh = BUF_INIT;
    buf_appendf(&sh, "[%d", batch);
    for (size_t i = 1; i < json_array_size(shape); i++) {
        long long d = json_integer_value(json_array_get(shape, i));
        elems *= d > 0 ? d : 1;
        buf_appendf(&sh, ",%lld", d);
    }
    buf_append(&sh, "]", 2);
    uint64_t s = seed ? seed : 1;
    for (int k = 0; k < n; k++) {
        struct buf body = BUF_INIT;
        size_t json_len = 0;
        if (binary) {
            /* Triton's binary tensor extension: a JSON header, then raw
             * little-endian FP32, and the output asked for in binary too. */
            buf_appendf(&body, "{\"inputs\":[{\"name\":\"%s\",\"datatype\":\"FP32\",\"shape\":%s,"
                               "\"parameters\":{\"binary_data_size\":%lld}}],"
                               "\"parameters\":{\"binary_data_output\":true}}",
                        name, sh.data, elems * batch * 4);
            json_len = body.len;
            for (long long i = 0; i < elems * batch; i++) {
                float f = (float)((double)(rnd(&s) % 20001) / 10000.0 - 1.0);
                buf_append(&body, &f, 4);
            }
        } else {
            buf_appendf(&body, "{\"inputs\":[{\"name\":\"%s\",\"datatype\":\"FP32\",\"shape\":%s,\"data\":[",
                        name, sh.data);
            for (long long i = 0; i < elems * batch; i++)
                buf_appendf(&body, "%s%.4f", i ? "," : "", (double)(rnd(&s) % 20001) / 10000.0 - 1.0);
            buf_append(&body, "]}]}", 4);
        }
        buf_appendf(&out[k].bytes, "POST /v2/models/%s/infer HTTP/1.1\r\nHost: %s\r\n"
                                   "Content-Type: %s\r\nContent-Length: %zu\r\n",
                    model, t->host, binary ? "application/octet-stream" : "application/json",
                    body.len);
        if (binary)
            buf_appendf(&out[k].bytes, "Inference-Header-Content-Length: %zu\r\n", json_len);
        buf_appendf(&out[k].bytes, "%s\r\n", extra);
        buf_append(&out[k].bytes, body.data, body.len);
        buf_free(&body);
    }
    buf_free(&sh);
    json_decref(root);
    return 0;
}

static int parse_list(const char *s, double *out, int max)
{
    int n = 0;
    char *copy = strdup(s), *save = NULL;
    for (char *tok = strtok_r(copy, ",", &save); tok && n < max; tok = strtok_r(NULL, ",", &save)) {
        char *end;
        double v = strtod(tok, &end);
        if (*end || v <= 0) {
            free(copy);
            return -1;
        }
        out[n++] = v;
    }
    free(copy);
    return n;
}

/* The server's own view of a step, from /metrics deltas (batchgate only). */
struct server_view {
    bool ok;
    double queue_sum, queue_count, compute_sum, compute_count, batch_sum, batch_count;
};

static double metric(const char *text, const char *name, const char *model)
{
    char key[512];
    snprintf(key, sizeof key, "%s{model=\"%s\"} ", name, model);
    const char *p = strstr(text, key);
    return p ? strtod(p + strlen(key), NULL) : -1;
}

static void server_view_read(const struct target *t, const char *model, struct server_view *v)
{
    memset(v, 0, sizeof *v);
    int status = 0;
    char *text = model ? http_get(t, "/metrics", NULL, &status) : NULL;
    if (!text || status != 200) {
        free(text);
        return;
    }
    v->queue_sum = metric(text, "batchgate_queue_duration_seconds_sum", model);
    v->queue_count = metric(text, "batchgate_queue_duration_seconds_count", model);
    v->compute_sum = metric(text, "batchgate_compute_duration_seconds_sum", model);
    v->compute_count = metric(text, "batchgate_compute_duration_seconds_count", model);
    v->batch_sum = metric(text, "batchgate_batch_size_sum", model);
    v->batch_count = metric(text, "batchgate_batch_size_count", model);
    v->ok = v->queue_count >= 0 && v->compute_count >= 0 && v->batch_count >= 0;
    free(text);
}

/* Everything a run was asked for on the command line. */
struct lg_opts {
    const char *url, *model, *method, *api_key;
    const char *json_path, *csv_path, *svg_path;
    struct target t;
    struct buf body;             /* --body FILE's bytes */
    bool has_body;
    struct buf headers;          /* --header lines, "N: V\r\n" each */
    double duration, warmup, budget_ms;
    int batch, priority, max_conns, drain_ms;
    bool quiet, constant, binary;
    uint64_t seed;
};

enum { NREQ = 8 };

/* The requests a run (or a workload) rotates through: NREQ infer bodies
 * with a model, else the one request of --method and --body. */
static int build_requests(const struct lg_opts *o, const char *model, int batch,
                          double budget_ms, int priority, const char *key, uint64_t seed,
                          struct lg_request *reqs, int *nreq, char *msg, int cap)
{
    struct buf h = BUF_INIT;
    buf_append(&h, o->headers.data ? o->headers.data : "", o->headers.len);
    if (key)
        buf_appendf(&h, "Authorization: Bearer %s\r\n", key);
    int rc = 0;
    if (model) {
        if (budget_ms > 0)
            buf_appendf(&h, "X-Request-Timeout-Ms: %.0f\r\n", budget_ms);
        if (priority > 0)
            buf_appendf(&h, "X-Priority: %d\r\n", priority);
        buf_append(&h, "", 1);
        rc = build_model_requests(&o->t, model, batch, o->binary, h.data, seed, reqs, NREQ, msg,
                                  cap);
        *nreq = NREQ;
    } else {
        buf_append(&h, "", 1);
        buf_appendf(&reqs[0].bytes, "%s %s HTTP/1.1\r\nHost: %s\r\n", o->method, o->t.path,
                    o->t.host);
        if (o->has_body || strcmp(o->method, "GET") != 0)
            buf_appendf(&reqs[0].bytes, "Content-Length: %zu\r\n", o->body.len);
        buf_appendf(&reqs[0].bytes, "%s\r\n", h.data);
        buf_append(&reqs[0].bytes, o->body.data ? o->body.data : "", o->body.len);
        *nreq = 1;
    }
    buf_free(&h);
    return rc;
}

static struct lg_config step_config(const struct lg_opts *o, struct lg_request *reqs, int nreq,
                                    bool open_loop, double target, double budget_ms,
                                    uint64_t seed)
{
    struct lg_config c = {
        .requests = reqs, .nrequests = nreq, .open_loop = open_loop,
        .rate = open_loop ? target : 0, .poisson = !o->constant,
        .concurrency = open_loop ? 0 : (int)target, .max_connections = o->max_conns,
        .warmup_s = o->warmup, .duration_s = o->duration,
        .budget_ns = (int64_t)(budget_ms * 1e6), .drain_ms = o->drain_ms,
        .seed = seed, .progress = !o->quiet && isatty(2),
    };
    snprintf(c.host, sizeof c.host, "%s", o->t.host);
    c.port = o->t.port;
    return c;
}

static void server_view_apply(const struct server_view *before, const struct server_view *after,
                              struct report_step *st)
{
    if (!before->ok || !after->ok)
        return;
    double q = after->queue_count - before->queue_count;
    double cc = after->compute_count - before->compute_count;
    st->server = true;
    st->server_queue_ms = q > 0 ? (after->queue_sum - before->queue_sum) / q * 1e3 : 0;
    st->server_compute_ms = cc > 0 ? (after->compute_sum - before->compute_sum) / cc * 1e3 : 0;
    double bc = after->batch_count - before->batch_count;
    st->server_batch = bc > 0 ? (after->batch_sum - before->batch_sum) / bc : 0;
}

static void warn_if_late(const struct report_step *st, double rate)
{
    if (st->open_loop && st->r.achieved_rate < 0.99 * rate && st->r.late_sends > st->r.sent / 100)
        fprintf(stderr, "batchgate-load: warning: the generator could not keep up with %.0f/s "
                        "(%llu sends late with a connection free); its latencies include its "
                        "own delay\n", rate, (unsigned long long)st->r.late_sends);
}

/* ---- several workloads at once ---- */

struct wl_run {
    const struct lg_workload *w;
    const char *model;
    struct lg_request reqs[NREQ];
    int nreq;
    struct lg_config c;
    struct report_step st;
    struct server_view before, after;
    char msg[1024];
    int rc;
};

static void *wl_main(void *arg)
{
    struct wl_run *r = arg;
    r->rc = lg_run_step(&r->c, &r->st.r, r->msg, (int)sizeof r->msg);
    return NULL;
}

/* The total of the workloads' results: counts and rates add up, latencies merge. */
static void wl_total(const struct wl_run *runs, int n, struct report_step *t)
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
        t->r.sent += r->sent;
        t->r.answered += r->answered;
        t->r.good += r->good;
        t->r.late_sends += r->late_sends;
        t->r.achieved_rate += r->achieved_rate;
        t->r.throughput += r->throughput;
        t->r.goodput += r->goodput;
        t->r.connections += r->connections;
        t->r.duration_s = r->duration_s;
    }
}

/* The server's view is per model: a workload shows it when it alone drove
 * its model, the total when every workload drove the same one. */
static int wl_alone_on_model(const struct wl_run *runs, int n, int i)
{
    for (int k = 0; k < n; k++)
        if (k != i && runs[i].model && runs[k].model && strcmp(runs[i].model, runs[k].model) == 0)
            return 0;
    return 1;
}

static int run_workloads(struct lg_opts *o, const struct lg_workload *wl, int nwl)
{
    struct wl_run *runs = calloc((size_t)nwl, sizeof *runs);
    if (!runs) {
        fprintf(stderr, "batchgate-load: out of memory\n");
        return 1;
    }
    int rc = 0;
    for (int i = 0; i < nwl && rc == 0; i++) {
        struct wl_run *r = &runs[i];
        const struct lg_workload *w = &wl[i];
        r->w = w;
        r->model = w->model[0] ? w->model : o->model;
        double budget = w->budget_ms >= 0 ? w->budget_ms : o->budget_ms;
        const char *key = w->key[0] ? w->key : o->api_key;
        uint64_t seed = o->seed + 7919 * (uint64_t)i;   /* workloads do not arrive in step */
        if (build_requests(o, r->model, w->batch ? w->batch : o->batch, budget,
                           w->priority >= 0 ? w->priority : o->priority, key, seed, r->reqs,
                           &r->nreq, r->msg, (int)sizeof r->msg) < 0) {
            fprintf(stderr, "batchgate-load: workload %s: %s\n", w->name, r->msg);
            rc = 1;
            break;
        }
        r->c = step_config(o, r->reqs, r->nreq, w->open_loop, w->target, budget, seed);
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
            server_view_read(&o->t, runs[i].model, &runs[i].before);
        int started = 0;
        for (; started < nwl; started++)
            if (pthread_create(&th[started], NULL, wl_main, &runs[started]) != 0) {
                fprintf(stderr, "batchgate-load: cannot start a thread for workload %s\n",
                        runs[started].w->name);
                rc = 1;
                break;
            }
        for (int i = 0; i < started; i++)
            pthread_join(th[i], NULL);
        for (int i = 0; i < nwl; i++)
            server_view_read(&o->t, runs[i].model, &runs[i].after);
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
                struct wl_run *r = &runs[i];
                if (r->rc < 0) {
                    fprintf(stderr, "batchgate-load: workload %s: %s\n", r->w->name, r->msg);
                    rc = 1;
                }
                if (wl_alone_on_model(runs, nwl, i))
                    server_view_apply(&r->before, &r->after, &r->st);
                same_model &= r->model && runs[0].model && strcmp(r->model, runs[0].model) == 0;
                report_table_row(stdout, &r->st);
                warn_if_late(&r->st, r->st.target);
                steps[i] = r->st;
            }
            struct report_step *total = &steps[nwl];
            wl_total(runs, nwl, total);
            if (same_model)
                server_view_apply(&runs[0].before, &runs[0].after, total);
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
        for (int k = 0; k < NREQ; k++)
            buf_free(&runs[i].reqs[k].bytes);
    free(runs);
    return rc;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"url", required_argument, NULL, 'u'},        {"model", required_argument, NULL, 'm'},
        {"rate", required_argument, NULL, 'r'},       {"concurrency", required_argument, NULL, 'c'},
        {"duration", required_argument, NULL, 'd'},   {"warmup", required_argument, NULL, 'w'},
        {"batch", required_argument, NULL, 'b'},      {"json", required_argument, NULL, 'J'},
        {"csv", required_argument, NULL, 'C'},        {"svg", required_argument, NULL, 'S'},
        {"method", required_argument, NULL, 'M'},     {"body", required_argument, NULL, 'B'},
        {"header", required_argument, NULL, 'H'},     {"budget-ms", required_argument, NULL, 'g'},
        {"priority", required_argument, NULL, 'p'},   {"constant", no_argument, NULL, 'k'},
        {"connections", required_argument, NULL, 'n'}, {"drain-ms", required_argument, NULL, 'D'},
        {"seed", required_argument, NULL, 's'},       {"quiet", no_argument, NULL, 'q'},
        {"binary", no_argument, NULL, 'x'},        {"trace", required_argument, NULL, 'T'},
        {"api-key", required_argument, NULL, 'K'},    {"workload", required_argument, NULL, 'W'},
        {"help", no_argument, NULL, 'h'},             {NULL, 0, NULL, 0},
    };
    struct lg_opts o = {
        .method = "GET", .duration = 10, .warmup = 2, .batch = 1, .max_conns = 1024,
        .drain_ms = 10000, .seed = 1, .body = BUF_INIT, .headers = BUF_INIT,
    };
    const char *rates = NULL, *concs = NULL, *body_path = NULL;
    double trace_period = 0, trace_peak = 0, trace_trough = 0;
    static struct lg_workload wl[LG_WORKLOADS_MAX];
    int nwl = 0;
    char msg[1024];
    int ch;
    opterr = 0;
    while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (ch) {
        case 'u': o.url = optarg; break;
        case 'm': o.model = optarg; break;
        case 'r': rates = optarg; break;
        case 'c': concs = optarg; break;
        case 'd': o.duration = atof(optarg); break;
        case 'w': o.warmup = atof(optarg); break;
        case 'b': o.batch = atoi(optarg); break;
        case 'J': o.json_path = optarg; break;
        case 'C': o.csv_path = optarg; break;
        case 'S': o.svg_path = optarg; break;
        case 'M': o.method = optarg; break;
        case 'B': body_path = optarg; break;
        case 'H':
            if (!strchr(optarg, ':') || strpbrk(optarg, "\r\n")) {
                fprintf(stderr, "batchgate-load: --header: need 'Name: value' on one line, got "
                                "\"%s\"\n", optarg);
                return EXIT_USAGE;
            }
            buf_appendf(&o.headers, "%s\r\n", optarg);
            break;
        case 'g': o.budget_ms = atof(optarg); break;
        case 'p': o.priority = atoi(optarg); break;
        case 'k': o.constant = true; break;
        case 'n': o.max_conns = atoi(optarg); break;
        case 'D': o.drain_ms = atoi(optarg); break;
        case 's': o.seed = strtoull(optarg, NULL, 10); break;
        case 'q': o.quiet = true; break;
        case 'x': o.binary = true; break;
        case 'K':
            if (!optarg[0] || strpbrk(optarg, " \t\r\n")) {
                fprintf(stderr, "batchgate-load: --api-key: a key without spaces\n");
                return EXIT_USAGE;
            }
            o.api_key = optarg;
            break;
        case 'W':
            if (nwl == LG_WORKLOADS_MAX) {
                fprintf(stderr, "batchgate-load: at most %d --workload\n", LG_WORKLOADS_MAX);
                return EXIT_USAGE;
            }
            if (lg_workload_parse(optarg, &wl[nwl], msg, (int)sizeof msg) < 0) {
                fprintf(stderr, "batchgate-load: %s\n", msg);
                return EXIT_USAGE;
            }
            for (int i = 0; i < nwl; i++)
                if (strcmp(wl[i].name, wl[nwl].name) == 0) {
                    fprintf(stderr, "batchgate-load: --workload %s: the name is used twice\n",
                            wl[nwl].name);
                    return EXIT_USAGE;
                }
            nwl++;
            break;
        case 'T':
            if (sscanf(optarg, "diurnal:%lf:%lf:%lf", &trace_period, &trace_peak,
                       &trace_trough) != 3 || trace_period <= 0 || trace_peak <= 0 ||
                trace_trough <= 0) {
                fprintf(stderr, "batchgate-load: --trace: need diurnal:PERIOD_S:PEAK:TROUGH "
                                "with three positive numbers (got \"%s\")\n", optarg);
                return EXIT_USAGE;
            }
            break;
        case 'h': usage(stdout); return 0;
        default:
            fprintf(stderr, "batchgate-load: unknown or incomplete option %s\n", argv[optind - 1]);
            usage(stderr);
            return EXIT_USAGE;
        }
    }
    if (!o.url || parse_url(o.url, &o.t) < 0) {
        fprintf(stderr, "batchgate-load: --url: need http://HOST:PORT[/PATH]\n");
        return EXIT_USAGE;
    }
    if ((rates && concs) || o.duration <= 0 || o.warmup < 0 || o.batch < 1 || o.max_conns < 1 ||
        o.drain_ms < 0) {
        fprintf(stderr, "batchgate-load: give --rate or --concurrency (not both), --duration > 0, "
                        "--warmup >= 0, --batch >= 1\n");
        return EXIT_USAGE;
    }
    if (trace_period > 0 && (rates || concs || nwl)) {
        fprintf(stderr, "batchgate-load: --trace sets the rate itself: give no --rate, "
                        "--concurrency or --workload\n");
        return EXIT_USAGE;
    }
    if (nwl && (rates || concs)) {
        fprintf(stderr, "batchgate-load: each --workload sets its own rate= or concurrency=: "
                        "give no --rate or --concurrency with them\n");
        return EXIT_USAGE;
    }
    if (body_path) {
        FILE *f = fopen(body_path, "rb");
        if (!f) {
            fprintf(stderr, "batchgate-load: --body %s: %s\n", body_path, strerror(errno));
            return EXIT_USAGE;
        }
        char chunk[65536];
        size_t n;
        while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
            buf_append(&o.body, chunk, n);
        fclose(f);
        o.has_body = true;
    }
    if (nwl) {
        int rc = run_workloads(&o, wl, nwl);
        buf_free(&o.body);
        buf_free(&o.headers);
        return rc;
    }
    /* A trace is one open-loop step whose mean rate, over whole periods, is
     * the mean of peak and trough. */
    char trace_rate[64];
    if (trace_period > 0) {
        snprintf(trace_rate, sizeof trace_rate, "%.3f", (trace_peak + trace_trough) / 2);
        rates = trace_rate;
    }
    double steps[MAX_STEPS];
    int nsteps = parse_list(rates ? rates : concs ? concs : "1", steps, MAX_STEPS);
    if (nsteps <= 0) {
        fprintf(stderr, "batchgate-load: --%s: a comma-separated list of positive numbers\n",
                rates ? "rate" : "concurrency");
        return EXIT_USAGE;
    }
    bool open_loop = rates != NULL;
    struct lg_request reqs[NREQ];
    memset(reqs, 0, sizeof reqs);
    int nreq = 1;
    if (build_requests(&o, o.model, o.batch, o.budget_ms, o.priority, o.api_key, o.seed, reqs,
                       &nreq, msg, (int)sizeof msg) < 0) {
        fprintf(stderr, "batchgate-load: %s\n", msg);
        return 1;
    }
    struct report_step results[MAX_STEPS];
    memset(results, 0, sizeof results);
    report_table_header(stdout, open_loop, false);
    int rc = 0, done = 0;
    for (int i = 0; i < nsteps; i++) {
        struct lg_config c = step_config(&o, reqs, nreq, open_loop, steps[i], o.budget_ms,
                                         o.seed + (uint64_t)i);
        c.trace_period_s = trace_period;
        c.trace_peak = trace_peak;
        c.trace_trough = trace_trough;
        struct server_view before, after;
        server_view_read(&o.t, o.model, &before);
        struct report_step *st = &results[i];
        st->open_loop = open_loop;
        st->target = steps[i];
        if (lg_run_step(&c, &st->r, msg, (int)sizeof msg) < 0) {
            fprintf(stderr, "batchgate-load: step %d: %s\n", i + 1, msg);
            rc = 1;
            break;
        }
        server_view_read(&o.t, o.model, &after);
        server_view_apply(&before, &after, st);
        report_table_row(stdout, st);
        done = i + 1;
        warn_if_late(st, steps[i]);
    }
    if (done > 0) {
        if (o.json_path && report_json(o.json_path, results, done) < 0)
            fprintf(stderr, "batchgate-load: cannot write %s\n", o.json_path), rc = 1;
        if (o.csv_path && report_csv(o.csv_path, results, done) < 0)
            fprintf(stderr, "batchgate-load: cannot write %s\n", o.csv_path), rc = 1;
        if (o.svg_path && report_svg(o.svg_path, results, done, o.url) < 0)
            fprintf(stderr, "batchgate-load: cannot write %s\n", o.svg_path), rc = 1;
    }
    for (int i = 0; i < NREQ; i++)
        buf_free(&reqs[i].bytes);
    buf_free(&o.body);
    buf_free(&o.headers);
    return rc;
}

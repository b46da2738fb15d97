/* main.c - batchgate-load: the load generator and benchmark harness.
 *
 *   batchgate-load --url URL --model NAME [--rate R[,R2,...] | --concurrency C[,C2,...]]
 *                  [--duration S] [--warmup S] [--batch ROWS] [--json F] [--csv F] [--svg F]
 *
 * With --model it sends KServe v2 infer requests with random inputs of the
 * model's shape (read from GET /v2/models/{m}); without it, it requests the
 * URL as it is (GET, or --method M --body FILE), for any HTTP server. A list
 * of rates or concurrencies is a sweep, one step each. */
#include <errno.h>
#include <getopt.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <jansson.h>

#include "common/buf.h"
#include "loadgen/engine.h"
#include "loadgen/report.h"

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

/* A blocking GET (model metadata, /metrics): the body, or NULL. */
static char *http_get(const struct target *t, const char *path, int *status)
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
    buf_appendf(&b, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", path, t->host);
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
    char *meta = http_get(t, path, &status);
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
    char *text = model ? http_get(t, "/metrics", &status) : NULL;
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
        {"help", no_argument, NULL, 'h'},             {NULL, 0, NULL, 0},
    };
    const char *url = NULL, *model = NULL, *rates = NULL, *concs = NULL, *json_path = NULL,
               *csv_path = NULL, *svg_path = NULL, *method = "GET", *body_path = NULL;
    double duration = 10, warmup = 2, budget_ms = 0;
    int batch = 1, priority = 0, max_conns = 1024, drain_ms = 10000, quiet = 0, constant = 0,
        binary = 0;
    uint64_t seed = 1;
    double trace_period = 0, trace_peak = 0, trace_trough = 0;
    struct buf headers = BUF_INIT;
    int ch;
    opterr = 0;
    while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (ch) {
        case 'u': url = optarg; break;
        case 'm': model = optarg; break;
        case 'r': rates = optarg; break;
        case 'c': concs = optarg; break;
        case 'd': duration = atof(optarg); break;
        case 'w': warmup = atof(optarg); break;
        case 'b': batch = atoi(optarg); break;
        case 'J': json_path = optarg; break;
        case 'C': csv_path = optarg; break;
        case 'S': svg_path = optarg; break;
        case 'M': method = optarg; break;
        case 'B': body_path = optarg; break;
        case 'H': buf_appendf(&headers, "%s\r\n", optarg); break;
        case 'g': budget_ms = atof(optarg); break;
        case 'p': priority = atoi(optarg); break;
        case 'k': constant = 1; break;
        case 'n': max_conns = atoi(optarg); break;
        case 'D': drain_ms = atoi(optarg); break;
        case 's': seed = strtoull(optarg, NULL, 10); break;
        case 'q': quiet = 1; break;
        case 'x': binary = 1; break;
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
    struct target t;
    if (!url || parse_url(url, &t) < 0) {
        fprintf(stderr, "batchgate-load: --url: need http://HOST:PORT[/PATH]\n");
        return EXIT_USAGE;
    }
    if ((rates && concs) || duration <= 0 || warmup < 0 || batch < 1 || max_conns < 1 ||
        drain_ms < 0) {
        fprintf(stderr, "batchgate-load: give --rate or --concurrency (not both), --duration > 0, "
                        "--warmup >= 0, --batch >= 1\n");
        return EXIT_USAGE;
    }
    if (trace_period > 0 && (rates || concs)) {
        fprintf(stderr, "batchgate-load: --trace sets the rate itself: give no --rate or "
                        "--concurrency\n");
        return EXIT_USAGE;
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
    enum { NREQ = 8 };
    struct lg_request reqs[NREQ];
    memset(reqs, 0, sizeof reqs);
    char msg[1024];
    int nreq = 1;
    if (model) {
        if (budget_ms > 0)
            buf_appendf(&headers, "X-Request-Timeout-Ms: %.0f\r\n", budget_ms);
        if (priority > 0)
            buf_appendf(&headers, "X-Priority: %d\r\n", priority);
        buf_append(&headers, "", 1);
        if (build_model_requests(&t, model, batch, binary, headers.data, seed, reqs, NREQ, msg,
                                 (int)sizeof msg) < 0) {
            fprintf(stderr, "batchgate-load: %s\n", msg);
            return 1;
        }
        nreq = NREQ;
    } else {
        struct buf body = BUF_INIT;
        if (body_path) {
            FILE *f = fopen(body_path, "rb");
            if (!f) {
                fprintf(stderr, "batchgate-load: --body %s: %s\n", body_path, strerror(errno));
                return EXIT_USAGE;
            }
            char chunk[65536];
            size_t n;
            while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
                buf_append(&body, chunk, n);
            fclose(f);
        }
        buf_append(&headers, "", 1);
        buf_appendf(&reqs[0].bytes, "%s %s HTTP/1.1\r\nHost: %s\r\n", method, t.path, t.host);
        if (body_path || strcmp(method, "GET") != 0)
            buf_appendf(&reqs[0].bytes, "Content-Length: %zu\r\n", body.len);
        buf_appendf(&reqs[0].bytes, "%s\r\n", headers.data);
        buf_append(&reqs[0].bytes, body.data, body.len);
        buf_free(&body);
    }
    struct report_step results[MAX_STEPS];
    memset(results, 0, sizeof results);
    report_table_header(stdout, open_loop);
    int rc = 0, done = 0;
    for (int i = 0; i < nsteps; i++) {
        struct lg_config c = {
            .requests = reqs, .nrequests = nreq, .open_loop = open_loop,
            .rate = open_loop ? steps[i] : 0, .poisson = !constant,
            .trace_period_s = trace_period, .trace_peak = trace_peak,
            .trace_trough = trace_trough,
            .concurrency = open_loop ? 0 : (int)steps[i], .max_connections = max_conns,
            .warmup_s = warmup, .duration_s = duration,
            .budget_ns = (int64_t)(budget_ms * 1e6), .drain_ms = drain_ms,
            .seed = seed + (uint64_t)i, .progress = !quiet && isatty(2),
        };
        snprintf(c.host, sizeof c.host, "%s", t.host);
        c.port = t.port;
        struct server_view before, after;
        server_view_read(&t, model, &before);
        struct report_step *st = &results[i];
        st->open_loop = open_loop;
        st->target = steps[i];
        if (lg_run_step(&c, &st->r, msg, (int)sizeof msg) < 0) {
            fprintf(stderr, "batchgate-load: step %d: %s\n", i + 1, msg);
            rc = 1;
            break;
        }
        server_view_read(&t, model, &after);
        if (before.ok && after.ok) {
            double q = after.queue_count - before.queue_count;
            double cc = after.compute_count - before.compute_count;
            st->server = true;
            st->server_queue_ms = q > 0 ? (after.queue_sum - before.queue_sum) / q * 1e3 : 0;
            st->server_compute_ms = cc > 0 ? (after.compute_sum - before.compute_sum) / cc * 1e3 : 0;
            double bc = after.batch_count - before.batch_count;
            st->server_batch = bc > 0 ? (after.batch_sum - before.batch_sum) / bc : 0;
        }
        report_table_row(stdout, st);
        done = i + 1;
        if (open_loop && st->r.achieved_rate < 0.99 * steps[i] &&
            st->r.late_sends > st->r.sent / 100)
            fprintf(stderr, "batchgate-load: warning: the generator could not keep up with %.0f/s "
                            "(%llu sends late with a connection free); its latencies include its "
                            "own delay\n", steps[i], (unsigned long long)st->r.late_sends);
    }
    if (done > 0) {
        if (json_path && report_json(json_path, results, done) < 0)
            fprintf(stderr, "batchgate-load: cannot write %s\n", json_path), rc = 1;
        if (csv_path && report_csv(csv_path, results, done) < 0)
            fprintf(stderr, "batchgate-load: cannot write %s\n", csv_path), rc = 1;
        if (svg_path && report_svg(svg_path, results, done, url) < 0)
            fprintf(stderr, "batchgate-load: cannot write %s\n", svg_path), rc = 1;
    }
    for (int i = 0; i < NREQ; i++)
        buf_free(&reqs[i].bytes);
    buf_free(&headers);
    return rc;
}

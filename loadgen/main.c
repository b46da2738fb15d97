/* main.c - batchgate-load: the load generator and benchmark harness.
 *
 *   batchgate-load --url URL --model NAME [--rate R[,R2,...] | --concurrency C[,C2,...]]
 *                  [--duration S] [--warmup S] [--batch ROWS] [--json F] [--csv F] [--svg F]
 *   batchgate-load --url URL --model NAME --workload NAME:key=K,rate=R [--workload ...]
 *   batchgate-load --url URL --openai chat|completions --model NAME
 *                  [--prompts FILE.jsonl | --synthetic SPEC] [--max-tokens N] [--no-stream] ...
 *
 * With --model it sends KServe v2 infer requests with random inputs of the
 * model's shape (read from GET /v2/models/{m}); without it, it requests the
 * URL as it is (GET, or --method M --body FILE), for any HTTP server. A list
 * of rates or concurrencies is a sweep, one step each. Several --workload
 * run side by side for one window (a thread each), each reported apart and
 * then in total: several tenants' traffic at once. With --openai it sends
 * OpenAI chat or completion requests and reports time to first token,
 * inter-token latency, time per output token and tokens/s (llmreq.h,
 * llmans.h). */
#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/optname.h"
#include "loadgen/engine.h"
#include "loadgen/llmreq.h"
#include "loadgen/report.h"
#include "loadgen/target.h"
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
        "  --bodies FILE        without --model: one body a line (up to 1024), sent in\n"
        "                       turn with --method (e.g. texts of many lengths)\n"
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
        "  --json F, --csv F, --svg F   write the steps (SVG: latency vs throughput;\n"
        "                       with --openai, time to first token vs the asked rate)\n"
        "  --quiet              no progress line\n"
        "  --help, --version    this text; the version\n"
        "\n"
        "OpenAI mode (time to first token, inter-token latency, tokens/s):\n"
        "  --openai chat|completions   POST /v1/chat/completions or /v1/completions (under\n"
        "                       the URL's path) with model --model\n"
        "  --prompts FILE       one JSON object a line, {\"prompt\": ...} or {\"messages\": [...]},\n"
        "                       optional \"max_tokens\"; lines sent in order, cycling\n"
        "  --synthetic in=MEAN[:SD],out=MEAN[:SD],prefixes=K,prefix_len=WORDS\n"
        "                       random texts: `in` words each (normal, clipped >= 1),\n"
        "                       max_tokens `out`, each text after one of K shared prefixes\n"
        "                       of prefix_len words (default: in=200, no prefixes)\n"
        "  --max-tokens N       max_tokens where a line or `out` gives none (default 128)\n"
        "  --stream, --no-stream   streamed answers (default) or whole ones\n"
        "  --dry-run N          print the first N request bodies, one a line, and exit\n"
        "\n"
        "Exit status: 0 success, 1 runtime failure, 2 bad usage.\n");
}

/* --rate R1,R2,... or --concurrency C1,C2,...: how many, or -1. */
static int parse_list(const char *s, bool integer, double hi, double *out, int max)
{
    int n = 0;
    char *copy = strdup(s), *save = NULL;
    for (char *tok = strtok_r(copy, ",", &save); tok && n < max; tok = strtok_r(NULL, ",", &save)) {
        double v;
        if (lg_parse_number(tok, integer ? 1 : 1e-6, hi, integer, &v) < 0) {
            free(copy);
            return -1;
        }
        out[n++] = v;
    }
    free(copy);
    return n;
}

/* A flag's number, or a usage error naming the flag and what it takes. */
#define FLAG_NUM(flag, s, lo, hi, integer, out, what)                                           \
    do {                                                                                         \
        double v_;                                                                               \
        if (lg_parse_number((s), (lo), (hi), (integer), &v_) < 0) {                                    \
            fprintf(stderr, "batchgate-load: %s: \"%s\" must be %s\n", (flag), (s), (what));     \
            return EXIT_USAGE;                                                                   \
        }                                                                                        \
        (out) = v_;                                                                              \
    } while (0)

/* --trace diurnal:PERIOD_S:PEAK:TROUGH, each field read whole and finite
 * (sscanf took "nan", which passed `<= 0` and left a closed-loop run, and
 * "2garbage"; "inf" was refused as a --rate). 0, or -1 having said why. */
static int parse_trace(const char *s, double *period, double *peak, double *trough)
{
    static const char *const names[] = {"PERIOD_S", "PEAK", "TROUGH"};
    double *out[] = {period, peak, trough};
    const char *p = s;
    if (strncmp(p, "diurnal:", 8) != 0)
        goto shape;
    p += 8;
    for (int i = 0; i < 3; i++) {
        size_t n = strcspn(p, ":");
        char field[64];
        if ((p[n] == ':') != (i < 2) || n >= sizeof field)
            goto shape;
        memcpy(field, p, n);
        field[n] = '\0';
        /* A rate past a million a second is refused as --rate is. */
        if (lg_parse_number(field, 1e-9, i == 0 ? 86400 * 7 : 1e6, false, out[i]) < 0) {
            fprintf(stderr, "batchgate-load: --trace: %s \"%s\" must be a number > 0%s\n",
                    names[i], field, i == 0 ? " (seconds)" : " (requests/s, up to 1000000)");
            return -1;
        }
        p += n + 1;
    }
    return 0;
shape:
    fprintf(stderr, "batchgate-load: --trace: need diurnal:PERIOD_S:PEAK:TROUGH with three "
                    "positive numbers (got \"%s\")\n", s);
    return -1;
}

/* The server's own view of a step, from /metrics deltas (batchgate only). */

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"url", required_argument, NULL, 'u'},        {"model", required_argument, NULL, 'm'},
        {"rate", required_argument, NULL, 'r'},       {"concurrency", required_argument, NULL, 'c'},
        {"duration", required_argument, NULL, 'd'},   {"warmup", required_argument, NULL, 'w'},
        {"batch", required_argument, NULL, 'b'},      {"json", required_argument, NULL, 'J'},
        {"csv", required_argument, NULL, 'C'},        {"svg", required_argument, NULL, 'S'},
        {"method", required_argument, NULL, 'M'},     {"body", required_argument, NULL, 'B'},
        {"bodies", required_argument, NULL, 'L'},
        {"header", required_argument, NULL, 'H'},     {"budget-ms", required_argument, NULL, 'g'},
        {"priority", required_argument, NULL, 'p'},   {"constant", no_argument, NULL, 'k'},
        {"connections", required_argument, NULL, 'n'}, {"drain-ms", required_argument, NULL, 'D'},
        {"seed", required_argument, NULL, 's'},       {"quiet", no_argument, NULL, 'q'},
        {"binary", no_argument, NULL, 'x'},        {"trace", required_argument, NULL, 'T'},
        {"api-key", required_argument, NULL, 'K'},    {"workload", required_argument, NULL, 'W'},
        {"openai", required_argument, NULL, 'O'},     {"prompts", required_argument, NULL, 'P'},
        {"synthetic", required_argument, NULL, 'Y'},  {"max-tokens", required_argument, NULL, 'X'},
        {"stream", no_argument, NULL, 'e'},           {"no-stream", no_argument, NULL, 'E'},
        {"dry-run", required_argument, NULL, 'R'},
        {"help", no_argument, NULL, 'h'},             {"version", no_argument, NULL, 'V'},
        {NULL, 0, NULL, 0},
    };
    struct lg_opts o = {
        .method = "GET", .duration = 10, .warmup = 2, .batch = 1, .max_conns = 1024,
        .drain_ms = 10000, .seed = 1, .body = BUF_INIT, .bodies = BUF_INIT, .headers = BUF_INIT,
    };
    const char *rates = NULL, *concs = NULL, *body_path = NULL, *bodies_path = NULL;
    double trace_period = 0, trace_peak = 0, trace_trough = 0;
    const char *openai = NULL, *prompts_path = NULL, *synth_spec = NULL;
    bool method_set = false, llm_flags = false, stream = true;
    int max_tokens = 128;
    long dry_run = -1;
    static struct lg_workload wl[LG_WORKLOADS_MAX];
    int nwl = 0;
    char msg[1024];
    int ch, answer = 0;
    opterr = 0;
    while ((ch = getopt_long(argc, argv, "hV", opts, NULL)) != -1) {
        const char *took = optname_took_option(argv);
        if (took) {
            fprintf(stderr, "batchgate-load: %s needs a value (\"%s\" is the next option)\n",
                    took, optarg);
            return EXIT_USAGE;
        }
        switch (ch) {
        case 'u': o.url = optarg; break;
        case 'm': o.model = optarg; break;
        case 'r': rates = optarg; break;
        case 'c': concs = optarg; break;
        case 'd': FLAG_NUM("--duration", optarg, 1e-3, 86400 * 7, false, o.duration,
                           "seconds, more than 0"); break;
        case 'w': FLAG_NUM("--warmup", optarg, 0, 86400, false, o.warmup, "seconds, 0 or more");
                  break;
        case 'b': FLAG_NUM("--batch", optarg, 1, 1 << 20, true, o.batch, "a whole number >= 1");
                  break;
        case 'J': o.json_path = optarg; break;
        case 'C': o.csv_path = optarg; break;
        case 'S': o.svg_path = optarg; break;
        case 'M': o.method = optarg; method_set = true; break;
        case 'B': body_path = optarg; break;
        case 'L': bodies_path = optarg; break;
        case 'H':
            if (!strchr(optarg, ':') || strpbrk(optarg, "\r\n")) {
                fprintf(stderr, "batchgate-load: --header: need 'Name: value' on one line, got "
                                "\"%s\"\n", optarg);
                return EXIT_USAGE;
            }
            buf_appendf(&o.headers, "%s\r\n", optarg);
            break;
        case 'g': {
            char *end;
            o.budget_ms = strtod(optarg, &end);
            if (!optarg[0] || *end || !(o.budget_ms >= 0) || o.budget_ms > 86400000) {
                fprintf(stderr, "batchgate-load: --budget-ms: \"%s\" must be a number of "
                                "milliseconds >= 0 (0: none)\n", optarg);
                return EXIT_USAGE;
            }
            break;
        }
        case 'p': FLAG_NUM("--priority", optarg, 0, 1000000, true, o.priority,
                           "a whole number (1 is the highest)"); break;
        case 'k': o.constant = true; break;
        case 'n': FLAG_NUM("--connections", optarg, 1, 1000000, true, o.max_conns,
                           "a whole number >= 1"); break;
        case 'D': FLAG_NUM("--drain-ms", optarg, 0, 86400000, true, o.drain_ms,
                           "milliseconds, 0 or more"); break;
        case 's': {
            char *end;
            errno = 0;
            o.seed = strtoull(optarg, &end, 10);
            /* A digit first: strtoull skips blanks and takes a sign, and
             * " -1" wrapped to 2^64 - 1. */
            if (optarg[0] < '0' || optarg[0] > '9' || *end || errno) {
                fprintf(stderr, "batchgate-load: --seed: \"%s\" must be a whole number >= 0\n",
                        optarg);
                return EXIT_USAGE;
            }
            break;
        }
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
            if (parse_trace(optarg, &trace_period, &trace_peak, &trace_trough) < 0)
                return EXIT_USAGE;
            break;
        case 'O':
            if (strcmp(optarg, "chat") != 0 && strcmp(optarg, "completions") != 0) {
                fprintf(stderr, "batchgate-load: --openai: chat or completions, got \"%s\"\n",
                        optarg);
                return EXIT_USAGE;
            }
            openai = optarg;
            break;
        case 'P': prompts_path = optarg; llm_flags = true; break;
        case 'Y': synth_spec = optarg; llm_flags = true; break;
        case 'X': {
            char *end;
            long v = strtol(optarg, &end, 10);
            if (*end || end == optarg || v < 1 || v > 10000000) {
                fprintf(stderr, "batchgate-load: --max-tokens: a whole number >= 1\n");
                return EXIT_USAGE;
            }
            max_tokens = (int)v;
            llm_flags = true;
            break;
        }
        case 'e': stream = true; llm_flags = true; break;
        case 'E': stream = false; llm_flags = true; break;
        case 'R': {
            char *end;
            dry_run = strtol(optarg, &end, 10);
            if (*end || end == optarg || dry_run < 0 || dry_run > 1000000) {
                fprintf(stderr, "batchgate-load: --dry-run: a number of requests to print\n");
                return EXIT_USAGE;
            }
            llm_flags = true;
            break;
        }
        case 'h':
        case 'V':
            if (!answer)
                answer = ch;   /* said once the whole line is read */
            break;
        default:
            fprintf(stderr, "batchgate-load: unknown or incomplete option %s\n", argv[optind - 1]);
            usage(stderr);
            return EXIT_USAGE;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "batchgate-load: unexpected argument \"%s\"\n", argv[optind]);
        usage(stderr);
        return EXIT_USAGE;
    }
    if (answer == 'V') {
        printf("batchgate-load %s\n", BATCHGATE_VERSION);
        return 0;
    }
    if (answer) {
        usage(stdout);
        return 0;
    }
    if (!o.url || lg_target_parse(o.url, &o.t) < 0) {
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
    if (llm_flags && !openai) {
        fprintf(stderr, "batchgate-load: --prompts, --synthetic, --max-tokens, --stream, "
                        "--no-stream and --dry-run belong to --openai\n");
        return EXIT_USAGE;
    }
    if (openai && !o.model) {
        fprintf(stderr, "batchgate-load: --openai needs --model NAME (each request's \"model\")\n");
        return EXIT_USAGE;
    }
    if (openai && (nwl || body_path || bodies_path || method_set || o.binary)) {
        fprintf(stderr, "batchgate-load: --openai builds its own requests: give no --workload, "
                        "--body, --bodies, --method or --binary with it\n");
        return EXIT_USAGE;
    }
    if (prompts_path && synth_spec) {
        fprintf(stderr, "batchgate-load: give --prompts or --synthetic, not both\n");
        return EXIT_USAGE;
    }
    struct llmreq *lr = NULL;
    if (openai) {
        struct llmreq_opts lo = {
            .chat = strcmp(openai, "chat") == 0, .stream = stream, .model = o.model,
            .max_tokens = max_tokens, .host = o.t.host, .url_path = o.t.path,
            .api_key = o.api_key, .seed = o.seed,
        };
        buf_append(&o.headers, "", 1);   /* NUL-terminated for lo.headers */
        lo.headers = o.headers.data;
        struct llmreq_synth syn;
        int rc = prompts_path ? llmreq_from_prompts(&lo, prompts_path, &lr, msg, (int)sizeof msg)
                 : llmreq_synth_parse(synth_spec ? synth_spec : "", &syn, msg, (int)sizeof msg) < 0
                     ? -1
                     : llmreq_from_synth(&lo, &syn, &lr, msg, (int)sizeof msg);
        if (rc < 0) {
            fprintf(stderr, "batchgate-load: %s\n", msg);
            buf_free(&o.headers);
            return EXIT_USAGE;
        }
        if (dry_run >= 0) {
            for (long k = 0; k < dry_run; k++) {
                char *b = llmreq_body(lr, (uint64_t)k);
                if (!b) {
                    fprintf(stderr, "batchgate-load: out of memory\n");
                    break;
                }
                puts(b);
                free(b);
            }
            llmreq_free(lr);
            buf_free(&o.headers);
            return fflush(stdout) == 0 ? 0 : 1;
        }
    }
    if (bodies_path && (body_path || o.model)) {
        fprintf(stderr, "batchgate-load: --bodies replaces --body and --model's bodies: give "
                        "one of them\n");
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
    if (bodies_path) {
        FILE *f = fopen(bodies_path, "rb");
        if (!f) {
            fprintf(stderr, "batchgate-load: --bodies %s: %s\n", bodies_path, strerror(errno));
            return EXIT_USAGE;
        }
        char *line = NULL;
        size_t cap = 0;
        ssize_t n;
        while ((n = getline(&line, &cap, f)) > 0) {
            while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
                n--;
            if (n == 0)
                continue;
            if (o.nbodies == LG_NREQ) {
                fprintf(stderr, "batchgate-load: --bodies %s: more than %d lines\n", bodies_path,
                        LG_NREQ);
                free(line);
                fclose(f);
                buf_free(&o.bodies);
                return EXIT_USAGE;
            }
            buf_append(&o.bodies, line, (size_t)n);
            buf_append(&o.bodies, "", 1);
            o.nbodies++;
        }
        free(line);
        fclose(f);
        if (!o.nbodies) {
            fprintf(stderr, "batchgate-load: --bodies %s: no lines\n", bodies_path);
            buf_free(&o.bodies);
            return EXIT_USAGE;
        }
    }
    if (nwl) {
        int rc = lg_workload_run(&o, wl, nwl);
        buf_free(&o.body);
        buf_free(&o.bodies);
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
    /* A rate past a million a second is no rate one process keeps, and a
     * concurrency is a whole number of connections. */
    int nsteps = parse_list(rates ? rates : concs ? concs : "1", !rates, rates ? 1e6 : 100000,
                            steps, MAX_STEPS);
    if (nsteps <= 0) {
        fprintf(stderr, "batchgate-load: --%s: a comma-separated list of %s\n",
                rates ? "rate" : "concurrency",
                rates ? "positive rates up to 1000000/s" : "whole numbers from 1 to 100000");
        return EXIT_USAGE;
    }
    bool open_loop = rates != NULL;
    struct lg_request reqs[LG_NREQ];
    memset(reqs, 0, sizeof reqs);
    int nreq = 1;
    if (!lr && lg_target_requests(&o, o.model, o.batch, o.budget_ms, o.priority, o.api_key, o.seed,
                                  reqs, &nreq, msg, (int)sizeof msg) < 0) {
        fprintf(stderr, "batchgate-load: %s\n", msg);
        return 1;
    }
    /* A step's result holds several histograms: too big for the stack by the 64. */
    struct report_step *results = calloc(MAX_STEPS, sizeof *results);
    if (!results) {
        fprintf(stderr, "batchgate-load: out of memory\n");
        llmreq_free(lr);
        return 1;
    }
    if (lr)
        report_llm_table_header(stdout, open_loop);
    else
        report_table_header(stdout, open_loop, false);
    int rc = 0, done = 0;
    for (int i = 0; i < nsteps; i++) {
        struct lg_config c = lg_target_step(&o, reqs, nreq, open_loop, steps[i], o.budget_ms,
                                         o.seed + (uint64_t)i);
        c.trace_period_s = trace_period;
        c.trace_peak = trace_peak;
        c.trace_trough = trace_trough;
        c.llm = lr;
        /* batchgate's /metrics view is of its KServe models, not of an
         * OpenAI server's. */
        const char *view_model = lr ? NULL : o.model;
        struct lg_server_view before, after;
        lg_target_view_read(&o.t, view_model, &before);
        struct report_step *st = &results[i];
        st->open_loop = open_loop;
        st->target = steps[i];
        st->llm = lr != NULL;
        if (lg_run_step(&c, &st->r, msg, (int)sizeof msg) < 0) {
            fprintf(stderr, "batchgate-load: step %d: %s\n", i + 1, msg);
            rc = 1;
            /* A step that ran and got no answer is still a result (its
             * errors broken down): written with the others, and the run
             * stops there. One that never ran (a name that does not
             * resolve) has none. */
            if (st->r.connections > 0) {
                if (lr)
                    report_llm_table_row(stdout, st);
                else
                    report_table_row(stdout, st);
                done = i + 1;
            }
            break;
        }
        lg_target_view_read(&o.t, view_model, &after);
        lg_target_view_apply(&before, &after, st);
        if (lr)
            report_llm_table_row(stdout, st);
        else
            report_table_row(stdout, st);
        done = i + 1;
        report_warn_late(st, steps[i]);
        report_warn_broken(st);
    }
    if (done > 0) {
        if (o.json_path && report_json(o.json_path, results, done) < 0)
            fprintf(stderr, "batchgate-load: cannot write %s\n", o.json_path), rc = 1;
        if (o.csv_path && report_csv(o.csv_path, results, done) < 0)
            fprintf(stderr, "batchgate-load: cannot write %s\n", o.csv_path), rc = 1;
        if (o.svg_path && report_svg(o.svg_path, results, done, o.url) < 0)
            fprintf(stderr, "batchgate-load: cannot write %s\n", o.svg_path), rc = 1;
    }
    for (int i = 0; i < LG_NREQ; i++)
        buf_free(&reqs[i].bytes);
    free(results);
    llmreq_free(lr);
    buf_free(&o.body);
    buf_free(&o.bodies);
    buf_free(&o.headers);
    return rc;
}

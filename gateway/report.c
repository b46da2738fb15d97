/* report.c - `batchgate report`: the usage ledger as a terminal audit
 * (docs/USAGE.md "Auditing"): totals for a period, one line per tenant (or
 * model), the idle share (compute debt), the cost per 1,000 inferences, and
 * the models that cost most while idle. It reads the state database of the
 * configuration's state_dir directly, so it works with the server stopped
 * as well as running (WAL: a reader never blocks the ledger's writer). */
#include "gateway/report.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "common/optname.h"
#include "gateway/config.h"
#include "gateway/usage_query.h"
#include "state/state.h"

#define REPORT_TOP_MODELS 10

static void report_usage(FILE *out)
{
    fprintf(out,
            "usage: batchgate report [--config FILE] [--from T] [--to T] [--by tenant|model]\n"
            "                        [--format table|csv|json]\n"
            "\n"
            "The usage ledger of the configuration's state_dir for a period (default: the\n"
            "last 7 days): requests, rows, busy, idle and held hours, idle share and cost per\n"
            "tenant (or model), and the models that cost most while idle. T: RFC 3339\n"
            "(2026-12-03T10:00:00Z), a date (2026-12-03) or Unix seconds.\n");
}

static int report_fail(const char *fmt, const char *a)
{
    fprintf(stderr, "batchgate: report: ");
    fprintf(stderr, fmt, a);
    fputc('\n', stderr);
    return 2;
}

static double report_pct(double part, double whole) { return whole > 0 ? 100 * part / whole : 0; }

/* The name column: as wide as the longest name (cut at 24, two long
 * model names read as one). */
static int report_width(const struct usage_rows *rows, bool tenant)
{
    int w = 24;
    for (int i = 0; i < rows->n; i++) {
        int n = (int)strlen(tenant ? rows->r[i].tenant : rows->r[i].model);
        w = n > w ? n : w;
    }
    return w;
}

static void report_line(int w, const char *name, const struct state_usage_row *r)
{
    /* No inference: a cost per inference is not a number (it read 0, as if
     * the held model had cost nothing). */
    char per_k[32] = "-";
    if (r->rows > 0)
        snprintf(per_k, sizeof per_k, "%.6f", r->cost / (double)r->rows * 1000);
    printf("%-*s %12lld %14lld %10.3f %10.3f %10.3f %7.1f%% %12.4f %12s\n", w, name,
           (long long)r->requests, (long long)r->rows, r->busy_s / 3600, r->idle_s / 3600,
           r->held_s / 3600, report_pct(r->idle_s, r->held_s), r->cost, per_k);
}

static void report_sum(struct state_usage_row *t, const struct state_usage_row *r)
{
    t->requests += r->requests;
    t->rows += r->rows;
    t->busy_s += r->busy_s;
    t->idle_s += r->idle_s;
    t->held_s += r->held_s;
    t->cost += r->cost;
    t->energy_j += r->energy_j;
}

/* The idle part of a row's cost: its held time is charged at one rate per
 * device and second, so idle's share of the cost is idle's share of held. */
static double report_idle_cost(const struct state_usage_row *r)
{
    return r->held_s > 0 ? r->cost * r->idle_s / r->held_s : 0;
}

/* The most idle cost first, then (unpriced devices cost nothing: all
 * ties) the most idle time: ordered by cost alone, a model with no idle
 * time could come first, and the list, which stops there, was empty. */
static int report_by_idle_cost(const void *a, const void *b)
{
    const struct state_usage_row *ra = a, *rb = b;
    double x = report_idle_cost(ra), y = report_idle_cost(rb);
    if (x != y)
        return (x < y) - (x > y);
    return (ra->idle_s < rb->idle_s) - (ra->idle_s > rb->idle_s);
}

int report_main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"config", required_argument, NULL, 'c'}, {"from", required_argument, NULL, 'f'},
        {"to", required_argument, NULL, 't'},     {"by", required_argument, NULL, 'b'},
        {"format", required_argument, NULL, 'o'}, {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *config_path = NULL, *from = NULL, *to = NULL, *by = "tenant", *format = "table";
    int ch;
    char opt[8];
    opterr = 0;
    optind = 2;   /* after "report" */
    while ((ch = getopt_long(argc, argv, ":c:h", opts, NULL)) != -1) {
        const char *took = optname_took_option(argv);
        if (took) {
            fprintf(stderr, "batchgate report: %s needs a value (\"%s\" is the next option)\n",
                    took, optarg);
            report_usage(stderr);
            return 2;
        }
        switch (ch) {
        case 'c': config_path = optarg; break;
        case 'f': from = optarg; break;
        case 't': to = optarg; break;
        case 'b': by = optarg; break;
        case 'o': format = optarg; break;
        case 'h': report_usage(stdout); return 0;
        /* Said, as the server's own flags say it (usage alone left the
         * reader to find which flag was wrong). */
        case ':':
            fprintf(stderr, "batchgate report: %s needs a value\n",
                    optname_refused(argv, opt, sizeof opt));
            report_usage(stderr);
            return 2;
        default:
            fprintf(stderr, "batchgate report: unknown option %s\n",
                    optname_refused(argv, opt, sizeof opt));
            report_usage(stderr);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "batchgate report: unexpected argument \"%s\"\n", argv[optind]);
        report_usage(stderr);
        return 2;
    }
    int64_t now = (int64_t)time(NULL);
    struct usage_query q = {.from = now - 7 * 86400, .to = now};
    if (from && usage_parse_time(from, &q.from) < 0)
        return report_fail("--from: \"%s\" is neither RFC 3339, a date nor Unix seconds "
                           "(years 1 to 9999)", from);
    if (to && usage_parse_time(to, &q.to) < 0)
        return report_fail("--to: \"%s\" is neither RFC 3339, a date nor Unix seconds "
                           "(years 1 to 9999)", to);
    if (strcmp(by, "tenant") != 0 && strcmp(by, "model") != 0)
        return report_fail("--by: \"%s\"; tenant or model", by);
    if (strcmp(format, "table") != 0 && strcmp(format, "csv") != 0 && strcmp(format, "json") != 0)
        return report_fail("--format: \"%s\"; table, csv or json", format);
    /* Either end may be the default: say which, and what it is. */
    if (q.from >= q.to)
        return report_fail("the period is empty: --from%s", !from ? " (by default, 7 days before "
                           "now) is not before --to" : !to ? " is not before --to (by default, "
                           "now)" : " is not before --to");
    q.step = q.to - q.from;   /* the whole period is one row per group */
    q.group_by = by[0] == 't' ? STATE_USAGE_BY_TENANT : STATE_USAGE_BY_MODEL;

    struct config cfg;
    struct error err = {0};
    config_defaults(&cfg);
    if (config_path && config_load_file(&cfg, config_path, &err)) {
        fprintf(stderr, "batchgate: report: %s\n", err.msg);
        config_release(&cfg);
        return 2;
    }
    char db[4200];
    snprintf(db, sizeof db, "%.4000s/batchgate.db", cfg.state_dir);
    struct stat sb;
    if (stat(db, &sb) != 0) {
        fprintf(stderr, "batchgate: report: no state database at %s (state_dir \"%s\"%s); "
                "name the server's configuration with --config\n", db, cfg.state_dir,
                config_path ? "" : ", the default");
        config_release(&cfg);
        return 2;
    }
    struct state *st = NULL;
    if (state_open_readonly(cfg.state_dir, &st, &err)) {
        fprintf(stderr, "batchgate: report: %s\n", err.msg);
        config_release(&cfg);
        return 1;
    }
    if (state_misses_wal(st))
        fprintf(stderr, "batchgate: report: warning: %s-wal holds commits this read cannot see "
                "(the folder is read-only, and SQLite reads a write-ahead log only where it may "
                "write beside it): the figures may be short; copy the folder somewhere "
                "writable to read them all\n", db);
    struct usage_rows groups = {0}, models = {0};
    int rc = state_usage_query(st, q.from, q.to, q.step, q.group_by, NULL, usage_rows_collect,
                               &groups, &err);
    if (rc == 0)
        rc = state_usage_query(st, q.from, q.to, q.step, STATE_USAGE_BY_MODEL, NULL,
                               usage_rows_collect, &models, &err);
    state_close(st);
    if (rc || groups.failed || models.failed) {
        fprintf(stderr, "batchgate: report: %s\n", rc ? err.msg : "out of memory");
        usage_rows_free(&groups);
        usage_rows_free(&models);
        config_release(&cfg);
        return 1;
    }
    if (format[0] != 't') {
        struct buf b = BUF_INIT;
        if (format[0] == 'c')
            usage_render_csv(&b, &q, &groups);
        else
            usage_render_json(&b, &q, &groups);
        fwrite(b.data, 1, b.len, stdout);
        if (format[0] == 'j')
            fputc('\n', stdout);
        buf_free(&b);
    } else {
        char t0[32], t1[32];
        usage_format_time(q.from, t0, sizeof t0);
        usage_format_time(q.to, t1, sizeof t1);
        printf("usage %s .. %s (%s)\n\n", t0, t1, db);
        int w = report_width(&groups, by[0] == 't');
        printf("%-*s %12s %14s %10s %10s %10s %8s %12s %12s\n", w, by, "requests",
               "inferences", "busy h", "idle h", "held h", "idle", "cost", "cost/1k inf");
        struct state_usage_row total = {0};
        for (int i = 0; i < groups.n; i++) {
            const struct state_usage_row *r = &groups.r[i];
            report_line(w, by[0] == 't' ? r->tenant : r->model, r);
            report_sum(&total, r);
        }
        if (groups.n == 0)
            printf("(no usage recorded in this period)\n");
        report_line(w, "total", &total);
        if (total.energy_j > 0)
            printf("\nenergy: %.3f kWh\n", total.energy_j / 3.6e6);
        if (models.n > 1)   /* with none, r may be NULL, which qsort may not be given */
            qsort(models.r, (size_t)models.n, sizeof *models.r, report_by_idle_cost);
        printf("\ntop models by compute debt (idle while resident)\n");
        int mw = report_width(&models, false);
        printf("%-*s %10s %8s %12s %10s\n", mw, "model", "idle h", "idle", "idle cost",
               "busy h");
        for (int i = 0; i < models.n && i < REPORT_TOP_MODELS; i++) {
            const struct state_usage_row *r = &models.r[i];
            if (r->idle_s <= 0)
                break;
            printf("%-*s %10.3f %7.1f%% %12.4f %10.3f\n", mw, r->model, r->idle_s / 3600,
                   report_pct(r->idle_s, r->held_s), report_idle_cost(r), r->busy_s / 3600);
        }
    }
    usage_rows_free(&groups);
    usage_rows_free(&models);
    config_release(&cfg);
    return 0;
}

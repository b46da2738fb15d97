/* usage_history.c - writes a generated history into a state database's
 * usage ledger, as the ledger itself would have: minute rows through
 * state_usage_add, rolled up by state_usage_rollup. For the year benchmark
 * (loadgen/bench/usage_year.sh: size and query time of a year of hourly
 * rows) and to give the dashboard's history charts a week to draw.
 *
 *   usage_history STATE_DIR [--days N] [--tenants T] [--models M]
 *                 [--devices D] [--price P] [--minute-days K]
 *
 * Every (tenant, model) pair gets a row every hour of the last N days (the
 * worst case for size: all pairs active all the time), on device
 * cuda<model % D>, with a day/night load curve per tenant; the last K days
 * stay minute rows (one per hour here), older ones are rolled up to hours
 * as the ledger does after usage.minute_retention_days. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <time.h>

#include "state/state.h"

static int arg_int(int argc, char **argv, const char *name, int def)
{
    for (int i = 2; i + 1 < argc; i++)
        if (strcmp(argv[i], name) == 0)
            return atoi(argv[i + 1]);
    return def;
}

int main(int argc, char **argv)
{
    if (argc < 2 || argv[1][0] == '-') {
        fprintf(stderr, "usage: usage_history STATE_DIR [--days N] [--tenants T] [--models M] "
                        "[--devices D] [--price P] [--minute-days K]\n");
        return 2;
    }
    int days = arg_int(argc, argv, "--days", 365);
    int tenants = arg_int(argc, argv, "--tenants", 10);
    int models = arg_int(argc, argv, "--models", 20);
    int devices = arg_int(argc, argv, "--devices", 4);
    double price = arg_int(argc, argv, "--price", 4);
    int minute_days = arg_int(argc, argv, "--minute-days", 7);
    struct state *st;
    struct error err = {0};
    if (state_open(argv[1], &st, &err)) {
        fprintf(stderr, "usage_history: %s\n", err.msg);
        return 1;
    }
    int64_t now = (int64_t)time(NULL) / 3600 * 3600;
    int64_t first = now - (int64_t)days * 86400;
    int n = tenants * models;
    struct state_usage_row *rows = calloc((size_t)n, sizeof *rows);
    srand(42);
    for (int64_t h = first; h < now; h += 3600) {
        int hour = (int)(h / 3600 % 24);
        double day = 0.5 + 0.5 * sin((hour - 8) * M_PI / 12);   /* peaks mid-afternoon UTC */
        for (int t = 0; t < tenants; t++)
            for (int m = 0; m < models; m++) {
                struct state_usage_row *r = &rows[t * models + m];
                memset(r, 0, sizeof *r);
                r->start = h;
                snprintf(r->tenant, sizeof r->tenant, "team-%02d", t);
                snprintf(r->model, sizeof r->model, "model-%02d", m);
                snprintf(r->cls, sizeof r->cls, "online");
                snprintf(r->device, sizeof r->device, "cuda%d", devices ? m % devices : 0);
                /* A model's hour is shared by its tenants; some are busier. */
                double weight = (1.0 + t % 3) / (2.0 * tenants);
                double noise = 0.8 + 0.4 * rand() / (double)RAND_MAX;
                r->busy_s = 3600.0 * weight * (0.15 + 0.6 * day) * noise;
                r->held_s = 3600.0 / tenants;
                if (r->busy_s > r->held_s)
                    r->busy_s = r->held_s;
                r->idle_s = r->held_s - r->busy_s;
                r->requests = (int64_t)(r->busy_s * 400);
                r->rows = r->requests * 4;
                r->cost = price * r->held_s / 3600 / models * devices;
            }
        if (state_usage_add(st, rows, n, &err)) {
            fprintf(stderr, "usage_history: %s\n", err.msg);
            return 1;
        }
        /* Rolled up a day at a time, as the ledger's hourly rollup would. */
        if (h % 86400 == 0 && state_usage_rollup(st, now - (int64_t)minute_days * 86400,
                                                 first - 86400, &err)) {
            fprintf(stderr, "usage_history: %s\n", err.msg);
            return 1;
        }
    }
    if (state_usage_rollup(st, now - (int64_t)minute_days * 86400, first - 86400, &err)) {
        fprintf(stderr, "usage_history: %s\n", err.msg);
        return 1;
    }
    free(rows);
    state_close(st);
    printf("usage_history: %d days x %d tenants x %d models written to %s\n", days, tenants,
           models, argv[1]);
    return 0;
}

/* report.h - batchgate-load's outputs: the terminal table, --json (SPEC.md's
 * shape), --csv, and --svg (latency against throughput over a sweep). */
#ifndef BG_LG_REPORT_H
#define BG_LG_REPORT_H

#include <stdbool.h>
#include <stdio.h>

#include "loadgen/engine.h"

struct report_step {
    bool open_loop;
    double target;                 /* rate or concurrency */
    struct lg_result r;
    bool server;                   /* the server's view was read (batchgate /metrics) */
    double server_queue_ms, server_compute_ms, server_batch;
};

void report_table_header(FILE *out, bool open_loop);
void report_table_row(FILE *out, const struct report_step *s);
int report_json(const char *path, const struct report_step *s, int n);
int report_csv(const char *path, const struct report_step *s, int n);
int report_svg(const char *path, const struct report_step *s, int n, const char *title);

#endif

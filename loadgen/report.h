/* report.h - batchgate-load's outputs: the terminal table, --json (SPEC.md's
 * shape), --csv, and --svg (latency against throughput over a sweep; in
 * OpenAI mode, time to first token against the asked rate). */
#ifndef BG_LG_REPORT_H
#define BG_LG_REPORT_H

#include <stdbool.h>
#include <stdio.h>

#include "loadgen/engine.h"

struct report_step {
    char name[64];                 /* a workload's, or "total"; "" in a plain run */
    bool open_loop;
    bool mixed;                    /* a total over open- and closed-loop workloads */
    double target;                 /* rate or concurrency (a total: their sum) */
    struct lg_result r;
    bool llm;                      /* OpenAI mode: r.llm is reported too */
    bool server;                   /* the server's view was read (batchgate /metrics) */
    double server_queue_ms, server_compute_ms, server_batch;
};

/* named: rows of workloads (a first column with the name). */
void report_table_header(FILE *out, bool open_loop, bool named);
void report_table_row(FILE *out, const struct report_step *s);
/* OpenAI mode's table: tokens and TTFT, ITL, TPOT, e2e instead of latency. */
void report_llm_table_header(FILE *out, bool open_loop);
void report_llm_table_row(FILE *out, const struct report_step *s);
/* To stderr: completions that broke (how many, the first one's reason). */
void report_warn_broken(const struct report_step *st);
/* To stderr: an open-loop step that sent under its rate because the
 * generator itself fell behind (its latencies include its own delay). */
void report_warn_late(const struct report_step *st, double rate);
int report_json(const char *path, const struct report_step *s, int n);
/* A run of several workloads: one step, the total, with each workload's
 * own object under "workloads". */
int report_json_workloads(const char *path, const struct report_step *total,
                          const struct report_step *w, int n);
int report_csv(const char *path, const struct report_step *s, int n);
/* Latency (p50, p99) against throughput; with s[0].llm, TTFT (p50, p99)
 * against the asked rate (or concurrency). */
int report_svg(const char *path, const struct report_step *s, int n, const char *title);

#endif

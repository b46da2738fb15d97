/* target.h - the server a batchgate-load run drives: its URL, what the
 * command line asked to send it, the requests built from that (KServe v2
 * infer bodies of its model's shape, read from its metadata, or one plain
 * request), each step's engine config, and the server's own view of a
 * step (batchgate's /metrics). main (sweeps) and workload.c (several
 * workloads at once) both build their steps from here. */
#ifndef BG_LG_TARGET_H
#define BG_LG_TARGET_H

#include <stdbool.h>
#include <stdint.h>

#include "common/buf.h"
#include "loadgen/engine.h"
#include "loadgen/report.h"

/* Requests rotated through with a model: 8 bodies of different inputs. */
/* Requests a run rotates through at most (--bodies lines); a model's
 * generated infer bodies are LG_MODEL_REQS of them. */
#define LG_NREQ 1024
#define LG_MODEL_REQS 8

struct lg_target {
    char host[256];
    int port;
    char path[2048];
};

/* Everything a run was asked for on the command line. */
struct lg_opts {
    const char *url, *model, *method, *api_key;
    const char *json_path, *csv_path, *svg_path;
    struct lg_target t;
    struct buf body;             /* --body FILE's bytes */
    bool has_body;
    struct buf bodies;           /* --bodies FILE: one body a line, each NUL-terminated */
    int nbodies;
    struct buf headers;          /* --header lines, "N: V\r\n" each */
    double duration, warmup, budget_ms;
    int batch, priority, max_conns, drain_ms;
    bool quiet, constant, binary;
    uint64_t seed;
};

/* The server's counters before or after a step (batchgate only). */
struct lg_server_view {
    bool ok;
    double queue_sum, queue_count, compute_sum, compute_count, batch_sum, batch_count;
};

/* "http://HOST:PORT[/PATH]" into t; -1 when it is not one. */
int lg_target_parse(const char *url, struct lg_target *t);
/* A number that is the whole of s, finite, in [lo, hi], and whole when
 * `integer`: 0 and *out, or -1. The one reading of every number the
 * command line gives (strtod and atof stopped at "1s" and read 1; "nan"
 * passed every comparison, and a rate of inf scheduled sends 0 ns apart
 * forever). */
int lg_parse_number(const char *s, double lo, double hi, bool integer, double *out);
/* The requests a run (or a workload) rotates through into reqs[LG_NREQ]:
 * LG_MODEL_REQS infer bodies with a model (its metadata read with `key`),
 * else the request of --method and --body, or one per --bodies line, in
 * the file's order; *nreq says how many. key: sent
 * as Authorization: Bearer, or NULL. Returns 0, or -1 with msg. */
int lg_target_requests(const struct lg_opts *o, const char *model, int batch, double budget_ms,
                       int priority, const char *key, uint64_t seed, struct lg_request *reqs,
                       int *nreq, char *msg, int cap);
/* One step's engine config against the target. */
struct lg_config lg_target_step(const struct lg_opts *o, struct lg_request *reqs, int nreq,
                                bool open_loop, double target, double budget_ms, uint64_t seed);
/* model's counters from the target's /metrics (v->ok false where none). */
void lg_target_view_read(const struct lg_target *t, const char *model, struct lg_server_view *v);
/* The step's server columns from two views. */
void lg_target_view_apply(const struct lg_server_view *before, const struct lg_server_view *after,
                          struct report_step *st);

#endif

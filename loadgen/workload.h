/* workload.h - one named workload of a batchgate-load run with several
 * (`--workload NAME:key=K,rate=R,...`): its own key, model, rate or
 * concurrency, rows, budget and priority, run beside the others for the
 * same window and reported apart (docs/LOADGEN.md "Several workloads"). */
#ifndef BG_LG_WORKLOAD_H
#define BG_LG_WORKLOAD_H

#include <stdbool.h>

#include "loadgen/target.h"

#define LG_WORKLOADS_MAX 16

struct lg_workload {
    char name[64];
    char key[1024];              /* "" : the run's --api-key, if any */
    char model[128];             /* "" : the run's --model */
    bool open_loop;              /* rate=R (open loop) or concurrency=C (closed) */
    double target;               /* R requests/s or C connections */
    int batch;                   /* 0: the run's --batch */
    double budget_ms;            /* < 0: the run's --budget-ms */
    int priority;                /* < 0: the run's --priority */
};

/* "NAME:key=K,model=M,rate=R|concurrency=C,batch=B,budget-ms=MS,priority=P"
 * into *w (names: letters, digits, - _ .). Returns 0, or -1 with a message
 * naming the part that is wrong (never the key). */
int lg_workload_parse(const char *spec, struct lg_workload *w, char *msg, int cap);
/* Runs the workloads side by side (a thread each, one window), prints a row
 * each and the total, writes o's --json, --csv, --svg. Returns the exit
 * status: 0, or 1 when one could not start or got no answer. */
int lg_workload_run(struct lg_opts *o, const struct lg_workload *wl, int nwl);

#endif

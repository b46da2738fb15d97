/* ledger.h - the usage ledger (SPEC.md "Usage and cost", docs/USAGE.md):
 * who used which device for how long, what stood idle while a model was
 * resident, and what it cost, per minute and (tenant, model, class,
 * device), kept in the state database (state/state.h).
 *
 * One thread, never on the request path: once a second it reads the
 * counters the workers keep anyway (serving/modelstats.h: each instance's
 * busy and resident time, its device time and rows by tenant and class)
 * and turns what changed since the last second into ledger rows by the
 * allocation rule (ledger_split); every `flush_s` seconds it writes the
 * rows gathered in one transaction. A crash loses what was not written yet
 * (at most flush_s seconds); a restart starts from the counters' zero and
 * adds to the same minutes, so the series continues without a double
 * count. */
#ifndef BG_LEDGER_H
#define BG_LEDGER_H

#include <stdint.h>

#include "batcher/work.h"
#include "common/error.h"
#include "serving/modelstats.h"
#include "serving/serving.h"
#include "state/state.h"

/* ---- the allocation rule (a pure function) ---- */

/* One model instance (or server) on a device over one sample. */
struct ledger_inst {
    double held_s;                    /* resident (loaded) time in the sample */
    double busy_s;                    /* of it, a batch (or a call) executing */
    /* Its use by tenant in the sample ([WORK_TENANTS_MAX]): busy time is
     * split in proportion to use[t].busy_s; requests and rows are counted
     * as they are. NULL: no batch recorded (busy goes as idle would). */
    const struct modelstats_tenant_use *use;
    /* The model's tenants' weights for its idle time ([ntenants]): their
     * shares in force, 0 for a tenant that may not use the model. */
    const double *idle_w;
};

/* What one (instance, tenant, class) is charged. held = busy + idle. */
struct ledger_piece {
    int inst, tenant, cls;            /* cls: 0 online, 1 offline (job lines) */
    int64_t requests, rows;
    double busy_s, idle_s, cost, energy_j;
};

/* Charges one device's sample of `wall_s` seconds: every instance's busy
 * time to the tenants and classes that used it, its idle time (held -
 * busy) to the model's tenants by idle_w (equal parts when all are 0;
 * class online); the device's price for the time anything was resident
 * (the longest held_s, at most wall_s) over all pieces by held time, so a
 * device holding two models is not charged twice; energy_j likewise.
 * Pieces into out (cap: n * ntenants * 2 is always enough); how many. */
int ledger_split(const struct ledger_inst *in, int n, int ntenants, double wall_s,
                 double price_per_hour, double energy_j, struct ledger_piece *out, int cap);

/* A piece of a sample that covered [t0, t1] (Unix seconds) spread over the
 * minutes it covers: its times, cost and energy by the part of the sample
 * each minute holds, its counts whole to the minute of its middle. Given
 * wholly to the middle's minute, a sample across a minute's edge put up to
 * a second into the neighbour (a minute of one device showed 60.09 s
 * held). A sample over LEDGER_SPREAD_MAX minutes (a stalled thread) goes
 * to its middle's. Fills minutes[] and out[] (room for LEDGER_SPREAD_MAX);
 * how many. */
#define LEDGER_SPREAD_MAX 4
int ledger_spread(double t0, double t1, const struct ledger_piece *p, int64_t *minutes,
                  struct ledger_piece *out);

/* ---- the thread ---- */

struct ledger_config {
    int flush_s;                      /* usage.flush_s [60]: how often rows are written */
    int minute_retention_days;        /* usage.minute_retention_days [7] */
    int hour_retention_days;          /* usage.hour_retention_days [400] */
};

/* A device's energy counter (joules since any fixed point); 0, or -1 when
 * the device has none (a CPU). */
typedef int (*ledger_energy_fn)(void *arg, const char *device, double *joules);

struct ledger;

/* Starts the thread. energy may be NULL. */
struct ledger *ledger_start(struct serving *s, struct state *st, const struct ledger_config *c,
                            ledger_energy_fn energy, void *energy_arg, struct error *err);
/* Takes a last sample, writes it, stops the thread. */
void ledger_stop(struct ledger *l);

/* Cost charged since the start by (tenant, device): cost_total. */
struct ledger_cost {
    char tenant[TENANT_NAME_MAX];
    char device[128];
    double cost;
};
/* The rows into *out (the caller frees it); how many. */
int ledger_costs(struct ledger *l, struct ledger_cost **out);

#endif

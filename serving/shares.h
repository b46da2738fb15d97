/* shares.h - tenants' shares of one device's time (SPEC.md "Tenants and
 * keys", docs/TENANTS.md).
 *
 * Each tenant with work is owed device time in proportion to its share:
 * its virtual time is the device time its rows used divided by its share,
 * and the tenant with the least virtual time is served first (the queue
 * cuts a batch from its requests first, batcher/queue.h). A tenant without
 * work is owed nothing meanwhile: when it comes back its virtual time is
 * raised to the device's virtual clock (no banked credit), so it gets its
 * share back from the next batch on, never a burst to make up. What a
 * tenant does not use goes to the others (lending), except the share of an
 * idle tenant with `lend` false, which stays free for it (reserved); and no
 * tenant holds more than its `limit` of the device (measured over the last
 * second, SHARES_TAU_NS). Device time is charged per batch, split over its
 * rows. Thread-safe (one mutex); nothing here blocks. */
#ifndef BG_SHARES_H
#define BG_SHARES_H

#include <stdbool.h>
#include <stdint.h>

#include "batcher/work.h"
#include "common/error.h"
#include "serving/tenant.h"

/* The window over which a tenant's fraction of the device is measured for
 * `limit` and for borrowing (an exponential moving sum). */
#define SHARES_TAU_NS 1000000000LL
/* A tenant that had no work for this long is idle: its reserved share is
 * kept free, and it banks no credit for the time. */
#define SHARES_IDLE_NS 100000000LL

struct shares;

/* `device` names it in metrics; `slots`: batches the device runs at once. */
struct shares *shares_new(const char *device, const struct tenants_config *tc, int slots,
                          struct error *err);
void shares_free(struct shares *s);
const char *shares_device(const struct shares *s);
/* The device's slots changed (its scheduler's, as members join and leave):
 * a tenant's use is measured against what the device can run now. */
void shares_set_slots(struct shares *s, int slots);
int shares_slots(struct shares *s);
/* The shares in force (a time window's, or the tenants' own when share is
 * NULL); offline_share: the part of the device job lines are guaranteed. */
void shares_set(struct shares *s, const double *share, double offline_share);

/* The tenants with work (has[t]) in the order they are owed device time,
 * into order[]; returns how many may be served now. Those left out are
 * over their limit or would borrow reserved time: *retry_ns says when to
 * ask again (0 when none is left out), and held_ns[t] (when not NULL) how
 * long tenant t should be held if it runs nothing meanwhile. off_held[t]
 * (when not NULL, TENANTS_MAX of them): in, whether tenant t has job lines
 * queued; out, whether they must wait, being over its limit (a reserved
 * share does not bind job lines: they fill that time); *retry_ns is then
 * set as well. */
int shares_rank(struct shares *s, int64_t now_ns, const bool *has, int *order, int64_t *retry_ns,
                int64_t *held_ns, bool *off_held);
/* Whether job lines are owed device time under the offline_share in
 * force (they ran less than it of the device, measured at that rate from
 * when they started, with at most 50 ms of wall time's worth banked or
 * owed): then they go before online work. */
bool shares_offline_owed(struct shares *s, int64_t now_ns);
/* A batch ran for exec_ns: each tenant is charged its rows' part. */
void shares_charge(struct shares *s, int64_t now_ns, const struct batch *b, int64_t exec_ns);
/* shares_charge from a batch's parts (batch_parts), kept for its charge
 * when its items are no longer its own (the watchdog answered them). */
void shares_charge_parts(struct shares *s, int64_t now_ns,
                         const uint32_t part[2][WORK_TENANTS_MAX], int64_t exec_ns);

struct shares_tenant_stats {
    double share;                     /* in force now */
    double busy_s[2];                 /* device time charged: [0] online, [1] offline rows */
    double borrowed_s;                /* the part of it used above its share */
    double fraction;                  /* of the device over the last second */
};
void shares_tenant_stats(struct shares *s, int tenant, struct shares_tenant_stats *out);
int shares_tenants(const struct shares *s);

#endif

/* devsched.h - one scheduler per device: the models placed on a device share
 * its execution slots by weight of device time (docs/SCHEDULING.md).
 *
 * A device is a (backend, device id) pair named like its metric label
 * ("synthetic0", "cuda1"). It has `slots` batches allowed to run at once:
 * the most instances any one member model has on it, so a model alone runs
 * exactly as without a scheduler. Each model on the device is a member with
 * a weight. A worker holding a batch calls devsched_acquire before running
 * it and devsched_release after; when the device is full, the slot that
 * frees next goes to, in order:
 *   1. an online batch before an offline one (a batch is offline when all
 *      its rows are job lines);
 *   2. an online batch that must start before another slot is expected to
 *      free, or it misses a deadline (its start-by instant: its earliest
 *      deadline less its predicted execution and the answer guard): the
 *      most urgent first (earliest start-by), when its tenant is ranked
 *      no worse than the batch rule 3 and 4 choose and its member is no
 *      more than DEVSCHED_URGENT_LEAD of virtual time ahead of that one's.
 *      Its device time is charged like any other, so its member pays the
 *      precedence back later;
 *   3. among one class, the batch of the tenant most owed device time
 *      (serving/shares.h, when tenants are configured: tenants' shares of a
 *      device hold across the models on it);
 *   4. then the member with the least virtual time (device time used /
 *      weight); a member that was idle is raised to the device's virtual
 *      clock when it comes back, so idleness banks no credit.
 * A slot goes to a member; of its waiting batches, the most urgent takes
 * it (a worker asking again as its batch ends leaves it to a sleeping
 * sibling whose batch is more urgent than its own).
 * A slot never stays free while a batch waits (work-conserving).
 *
 * The decision is devsched_pick, a pure function; the core (struct
 * devsched_core) is the bookkeeping without threads or clocks, so tests and
 * simulations drive exactly the code the workers use. struct devsched wraps
 * a core with a mutex and condition variables. */
#ifndef BG_DEVSCHED_H
#define BG_DEVSCHED_H

#include <stdbool.h>
#include <stdint.h>

#include "batcher/work.h"
#include "common/error.h"

#define DEVSCHED_MAX_MEMBERS 64
/* Waiting online batches per member whose start-by is tracked (a member has
 * at most one per instance); past it a batch waits as if it had none. */
#define DEVSCHED_MAX_WAITERS 32
#define DEVSCHED_WEIGHT_MAX 1000

enum devsched_class { DEVSCHED_ONLINE, DEVSCHED_OFFLINE, DEVSCHED_NCLASSES };

/* ---- the decision (pure) ---- */

/* What devsched_pick sees of one member. */
struct devsched_view {
    int64_t vtime;                    /* device ns x DEVSCHED_VT_SCALE / weight */
    int weight;                       /* 1..DEVSCHED_WEIGHT_MAX */
    int waiting[DEVSCHED_NCLASSES];   /* batches of each class waiting for a slot */
    int64_t start_by;                 /* earliest start-by of its waiting online
                                       * batches; 0: none has a deadline */
    int64_t est_ns;                   /* its usual batch's device time (recent mean) */
    int tenant_rank;                  /* best rank (0 first) of the tenants of its waiting
                                       * online batches; 0 without tenants */
};

/* A batch asking for a slot: its class, its start-by instant (0: no
 * deadline; offline batches have none) and its tenant (the one its rows
 * were cut for first). */
struct devsched_ask {
    enum devsched_class cls;
    int64_t start_by;
    int tenant;
};

/* Who gets a slot that is free at now_ns: the index of the member and, in
 * *cls, the class of its batch; -1 when nobody waits. Online before
 * offline (devsched_core_grant asks for an offline batch first while job
 * lines are owed time: devsched_core.offline_owed); among online batches the best tenant rank, then the least
 * virtual time, unless another
 * member's batch must start before the slot would free again (its start-by
 * before now_ns + the winner's est_ns, or + horizon_ns when a running batch
 * is expected to free a slot sooner; 0: none runs): then the earliest such
 * start-by. Ties go to the heavier weight, then the lower index (a fixed
 * order keeps tests and simulations reproducible). */
int devsched_pick(const struct devsched_view *v, int n, int64_t now_ns, int64_t horizon_ns,
                  enum devsched_class *cls);

/* Virtual time is kept in device ns x this / weight: integer and exact
 * enough for weights up to DEVSCHED_WEIGHT_MAX. */
#define DEVSCHED_VT_SCALE 1000
/* How far ahead of the weights' choice, in virtual time, a member's urgent
 * batch may still go first (devsched_pick): 250 ms of device time at
 * weight 1 (x its weight). */
#define DEVSCHED_URGENT_LEAD ((int64_t)250 * 1000000 * DEVSCHED_VT_SCALE)

/* ---- the core: bookkeeping without threads ---- */

struct devsched_core {
    struct devsched_view m[DEVSCHED_MAX_MEMBERS];
    int running[DEVSCHED_MAX_MEMBERS];             /* slots each member holds */
    int granted[DEVSCHED_MAX_MEMBERS][DEVSCHED_NCLASSES]; /* handed over, not yet taken */
    /* A batch is charged its member's usual device time (m[i].est_ns) when
     * it is handed a slot and corrected when it ends, so with several slots
     * a member with long batches running is not picked again as if it used
     * none. */
    int64_t ahead_ns[DEVSCHED_MAX_MEMBERS];        /* charged for batches not ended */
    /* Each waiting online batch's start-by and tenant. */
    struct devsched_ask wait[DEVSCHED_MAX_MEMBERS][DEVSCHED_MAX_WAITERS];
    int nwait[DEVSCHED_MAX_MEMBERS];
    int n;                                         /* members' indices in use: 0..n-1 */
    bool gone[DEVSCHED_MAX_MEMBERS];               /* a member that left: its index is free */
    int instances[DEVSCHED_MAX_MEMBERS];           /* what each member joined with */
    int slots, used;
    /* The device's virtual clock: never decreases; the least virtual time
     * of the active members (waiting, running or granted) whenever one is. */
    int64_t vclock;
    /* Job lines are owed device time under the offline_share in force
     * (shares_offline_owed), set before each grant: an offline batch then
     * goes before online ones, whichever member's (within a model's queue
     * they already did; across the models of a device they never ran while
     * another had online work). */
    bool offline_owed;
};

void devsched_core_init(struct devsched_core *c);
/* Adds a member with `instances` workers on the device (the slots grow to
 * the most of any member). Returns its index (a departed member's, when
 * one is free), or -1 when full. */
int devsched_core_join(struct devsched_core *c, int weight, int instances);
/* Member i leaves (its copy was freed; it has nothing running, granted or
 * waiting): its index is free again and the slots are the most of those
 * left. A device shared by reloaded copies ran out of its 64 indices, and
 * no model could load on it again. */
void devsched_core_leave(struct devsched_core *c, int i);
/* A batch of member i asks for a slot: true when one is free and nobody
 * waits; either way it is counted as waiting until it takes a grant. */
bool devsched_core_acquire(struct devsched_core *c, int i, const struct devsched_ask *a);
/* Member i's batch left its slot after exec_ns of device time. */
void devsched_core_release(struct devsched_core *c, int i, int64_t exec_ns);
/* Hands free slots to waiters while both exist, as devsched_pick decides
 * at now_ns; rank_of[t]: tenant t's rank (0 first; NULL: no tenants);
 * calls grant(arg, member, class) for each slot handed over (it is
 * recorded in `granted`). */
void devsched_core_grant(struct devsched_core *c, int64_t now_ns, const int *rank_of,
                         void (*grant)(void *arg, int member, enum devsched_class cls), void *arg);
/* A waiter of member i, as it asked, takes a slot handed to it: true, or
 * false when none was (it waits on). */
bool devsched_core_take(struct devsched_core *c, int i, const struct devsched_ask *a);
/* Which tenants have online batches waiting (has[t]). */
void devsched_core_tenants_waiting(const struct devsched_core *c, bool *has);
/* Whether members other than i are running or waiting: the device has
 * other work to do while i's queue waits for company. */
bool devsched_core_others_active(const struct devsched_core *c, int i);

/* ---- a device, for threads ---- */

struct devsched;

/* `name` is the device's label ("synthetic0"). */
struct devsched *devsched_new(const char *name, struct error *err);
void devsched_free(struct devsched *d);
const char *devsched_name(const struct devsched *d);
/* Adds a model with `weight` and `instances` workers on this device; its
 * member index (0 and up), or a negative code with a message. */
int devsched_join(struct devsched *d, const char *model, int weight, int instances,
                  struct error *err);
/* The member's model is gone (devsched_core_leave); ignored while it still
 * runs or waits (a worker left stranded in a call). */
void devsched_leave(struct devsched *d, int member);
/* Tenants' shares of this device (NULL: none): waiting batches are ranked
 * by their tenant (rule 3). Set before any worker starts. */
struct shares;
void devsched_set_shares(struct devsched *d, struct shares *sh);
/* Blocks until `member`'s batch holds a slot. */
void devsched_acquire(struct devsched *d, int member, const struct devsched_ask *a);
/* Gives the slot back; the batch ran for exec_ns. */
void devsched_release(struct devsched *d, int member, int64_t exec_ns);
/* devsched_release and devsched_acquire as one step, for a worker that
 * already holds its next batch: it competes for the freed slot at once
 * instead of looking idle for an instant (which, with one slot and
 * single-instance members, would hand every slot to the others in turn
 * and make the weights meaningless). */
void devsched_release_acquire(struct devsched *d, int member, int64_t exec_ns,
                              const struct devsched_ask *next);
/* devsched_core_others_active, for the batcher's policy (policy_load's
 * device_has_other_work): safe from any thread. */
bool devsched_others_active(struct devsched *d, int member);
/* After close, acquire returns at once (shutdown: a worker must never wait
 * for a slot held by a call that will not return). */
void devsched_close(struct devsched *d);

struct devsched_member_stats {
    int weight;
    int slots;                        /* the device's */
    double wait_s;                    /* batches' time waiting for a slot, summed */
    double granted_s;                 /* device time charged to the member */
};
void devsched_member_stats(struct devsched *d, int member, struct devsched_member_stats *out);

#endif

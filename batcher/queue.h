/* queue.h - a model's queued requests and the decisions taken on them:
 * admission, expiry of requests that can no longer meet their deadline, and
 * the next batch. No locks and no clock of its own: batcher.c wraps it with a
 * mutex and the real clock; the simulator (sim.h) drives it on a virtual one.
 *
 * Tokens: an item costs work_tokens(it) (work.h), its rows unless it gives
 * tokens. A batch holds at most max_batch_size rows and, with
 * batching.max_batch_tokens, at most that many tokens; an item over either
 * is refused at push. Every execution time is planned in tokens (and
 * tokens_sq, latmodel.h), so for a model without tokens all is as rows.
 *
 * Three orders over the same intrusive items: service order (priority, then
 * earliest deadline, then arrival) from which batches are cut; arrival order,
 * whose head is the oldest request (max_queue_delay, and aging); deadline
 * order, whose head is the next request to expire.
 *
 * Starvation: strict priority alone could leave a low-priority request
 * waiting forever under a steady stream of higher ones. The oldest request
 * in the queue goes first once it has waited `aging_ns`, whatever its
 * priority, so every request without a deadline is served within
 * aging_ns + (requests ahead of it that aged first) x batch time.
 *
 * Tenants: each tenant's online requests are also kept in service order of
 * their own. When the caller ranks the tenants (bqueue.rank: who is owed
 * device time first, serving/shares.h), the policy sees the queue tenant by
 * tenant in that order (each in service order; an aged request still
 * first), so a batch is cut from the most owed tenant's requests and filled
 * with the next ones'; a tenant left out of the ranking (over its limit)
 * is not served until it is ranked again. Without a ranking (nrank 0) the
 * queue is one service order, as without tenants.
 *
 * A full queue and tenants (tenant_fair): a request of a tenant holding
 * fewer queued requests than the tenant holding the most is admitted, and
 * the latter's last request in service order leaves instead (answered 429
 * by the caller): a flooding tenant fills the queue only while no one else
 * needs room, so its flood cannot turn another tenant's requests into 429s.
 *
 * Offline rows (infer_item.offline, a job's lines) wait in a FIFO of their
 * own, outside the three orders: no deadline, never aged, not counted
 * against max_queue_size (the jobs runner bounds them), so they can neither
 * jump nor crowd out online requests. bqueue_take hands them out only in
 * device time no online request needs:
 *   - no online request queued: a batch of offline rows starts at once;
 *   - online requests queued but the policy waits: a batch of k offline
 *     rows starts only if now + exec(k) <= the instant the online work must
 *     start, i.e. min(the policy's wake, every queued deadline - guard -
 *     exec(queued online rows, up to a full batch));
 *   - offline_first (a time window guarantees job lines a part of the
 *     device, and they are below it): a batch of offline rows goes before
 *     the online requests, the one case where job lines may delay them;
 *   - an online batch is cut and no online request is left queued:
 *     offline rows fill its empty rows (up to both caps) only while
 *     now + exec(rows) stays within every member's deadline - guard, so no
 *     member is made late (with online requests left queued, a longer
 *     batch would start them later: no fill then). */
#ifndef BG_QUEUE_H
#define BG_QUEUE_H

#include <stdbool.h>
#include <stdint.h>

#include "backends/model.h"
#include "batcher/work.h"
#include "common/error.h"
#include "batcher/latmodel.h"
#include "batcher/policy.h"

struct bqueue_config {
    int max_batch_size;
    int preferred[MODEL_MAX_PREFERRED];
    int npreferred;
    int64_t max_queue_delay_ns;
    int max_queue_size;
    int default_priority;
    int64_t aging_ns;
    enum policy_kind kind;
    int max_batch_tokens;             /* 0: no token cap */
    bool group_by_length;             /* with max_batch_tokens (group.h) */
};

struct bqueue {
    struct bqueue_config cfg;
    struct policy_config pcfg;
    struct list svc;                  /* infer_item.q_svc: service order */
    struct list arr;                  /* infer_item.q_arr: arrival order */
    struct list dl;                   /* infer_item.q_dl: deadline order, deadlines only */
    int n;                            /* online requests queued */
    struct list ten[WORK_TENANTS_MAX];   /* infer_item.q_ten: each tenant's service order */
    int tn[WORK_TENANTS_MAX];         /* each tenant's online requests queued */
    /* With tenants: a full queue makes room for a tenant holding fewer
     * requests than another by refusing that one's last (bqueue_push). */
    bool tenant_fair;
    struct infer_item *evicted;       /* refused to make room; the caller answers them 429 */
    int rank[WORK_TENANTS_MAX];       /* tenants in the order they are owed; set by the caller */
    int nrank;                        /* 0: no ranking (one service order); -1: every
                                       * tenant with requests is held back */
    int64_t rank_retry_ns;            /* with requests but none ranked: ask again after this */
    int64_t held_at[WORK_TENANTS_MAX];   /* the last ranking that held the tenant back */
    /* How long that ranking expected it held (set by the caller with the
     * ranking; 0: not said): the Retry-After of its expired requests. */
    int64_t held_for[WORK_TENANTS_MAX];
    int64_t held_until[WORK_TENANTS_MAX];
    bool offline_first;               /* offline rows are owed device time: a batch of them
                                       * goes first (set with the ranking) */
    /* Tenants whose job lines wait: over their `limit` (set by the caller
     * with the ranking, also when only job lines are queued). Their lines
     * are passed over; the others' keep their FIFO order. */
    bool off_held[WORK_TENANTS_MAX];
    struct list off;                  /* infer_item.q_svc of offline items: FIFO */
    int noff;                         /* offline items queued */
    int toff[WORK_TENANTS_MAX];       /* ... of each tenant */
    struct policy_request *view;      /* scratch for the policy */
    struct policy_token_info *view_tok;   /* ... its requests' tokens */
    struct policy_tokens ptok;        /* the token cap, with view_tok */
    bool group;                       /* length grouping (group.h): group_by_length and a
                                       * token cap */
    int *group_work;                  /* view_cap ints, for it */
    struct infer_item **view_items;
    int view_cap;
    int *pick_scratch;                /* 2 x (max_batch_size + 1), for the policy */
    /* The most tokens per row and tokens_sq per token any item brought:
     * without max_batch_tokens, what bounds a batch's tokens and an item's
     * execution (bqueue_full_tokens). 1 and 0 for a model without tokens. */
    int tokens_per_row_max;
    int64_t sq_per_token_max;
    /* Every deadline is planned as this much earlier (guard.h); the batcher
     * sets it before each operation, 0 in the simulator. */
    int64_t guard_ns;
    /* The arrival rate the policy weighs a wait against (rate.h): set by the
     * batcher and the simulator before each bqueue_take. */
    struct policy_load load;
    /* When the latency model last learned a batch (the batcher sets it), and
     * when a request was last admitted as a probe (bqueue_push). */
    int64_t learned_at_ns, probe_at_ns;
};

/* A model that refuses every request with a budget learns nothing more:
 * one slow first call upstream, a stall in the warmup, or a device since
 * grown faster would turn budgets away for good. With no batch learned for
 * this long, one request the model would refuse is admitted instead, its
 * budget set aside (a probe): its batch is measured, and the model moves. */
#define BQUEUE_PROBE_NS 1000000000LL

/* From a model's batching config. */
void bqueue_config_from_model(struct bqueue_config *qc, const struct model_batching *b,
                              enum policy_kind kind);
int bqueue_init(struct bqueue *q, const struct bqueue_config *cfg);
void bqueue_free(struct bqueue *q);

/* Admits it: -BG_EINVAL (rows, or tokens over max_batch_tokens: the
 * message names both numbers), -BG_EQUEUEFULL (also when the queue is
 * full and no tenant holds more requests than its tenant; with tenant_fair,
 * a request that made room leaves on q->evicted), or -BG_EDEADLINE when its
 * deadline cannot be met even alone on an idle instance (`lat`, the fastest
 * instance's model; NULL: no early rejection), unless it is admitted as a
 * probe (BQUEUE_PROBE_NS; its deadline_ns is then 0). */
int bqueue_push(struct bqueue *q, struct infer_item *it, int64_t now_ns,
                const struct latmodel *lat, struct error *err);
/* Offline items (it->offline) go to the offline FIFO: never refused for
 * the queue's size, never early-504'd (they have no deadline). */
/* Takes a queued item out (client gone). */
void bqueue_remove(struct bqueue *q, struct infer_item *it);

/* Unlinks every request that can no longer meet its deadline even alone,
 * chained through `next` into *expired; returns when the next one would
 * expire (POLICY_NEVER if none). No-op for the fixed-delay policy. */
/* After a ranking (rank, nrank set for the tenants with requests, has):
 * those it left out were held back now. A request that expires after its
 * tenant was held since it came is marked infer_item.held. */
void bqueue_note_held(struct bqueue *q, const bool *has, int64_t now_ns);
int64_t bqueue_expire(struct bqueue *q, int64_t now_ns, const struct latmodel *lat,
                      struct infer_item **expired);

/* Cuts the next batch for an idle instance with latency model `lat`: fills
 * b->head/nitems/rows, stamps each item's t_dequeue_ns and t_planned_ns, and
 * returns 1; or returns 0 and sets *wake_ns. */
int bqueue_take(struct bqueue *q, int64_t now_ns, const struct latmodel *lat, struct batch *b,
                int64_t *wake_ns);

/* Whether an online request of tenant t would find a place now (the queue
 * not full, or room made for it as bqueue_push would). */
bool bqueue_has_room(const struct bqueue *q, int t);

/* Which tenants have online requests queued: has[t] for each (returns how
 * many have); and job lines, off_has[t] (when not NULL). For the caller's
 * ranking. */
int bqueue_tenants_waiting(const struct bqueue *q, bool *has, bool *off_has);

/* The service order: a is served before b (priority, deadline, arrival). */
bool bqueue_served_before(const struct infer_item *a, const struct infer_item *b);

/* Unlinks everything (close), chained through `next`. */
struct infer_item *bqueue_drain(struct bqueue *q);

#endif

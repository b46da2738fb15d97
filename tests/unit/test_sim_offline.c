/* test_sim_offline.c - the offline rules of batcher/queue.h (docs/JOBS.md)
 * proved on the simulator (batcher/sim.h): the server's queue and policy on
 * a virtual clock, fed thousands of random traces that mix online requests
 * (budgets, rows, priorities, bursts) with job backlogs (offline lines of
 * random count and rows, arriving at once or trickling in), on 1 to 3
 * instances, under the three policies. Seeded: a failure prints
 * BG_TEST_SEED=... and that seed replays the one trace.
 *
 * What is proved (docs/SCHEDULING.md "Offline work and online deadlines"
 * and "What the simulator checks"):
 *   - at every batch, through sim_run's checks: every request, online or
 *     offline, is answered exactly once and in one batch; offline rows are
 *     never refused or expired and leave in FIFO order; offline rows never
 *     make an online request queued at their cut miss its latest start, as
 *     the queue predicted it, and a batch carrying them ends within every
 *     online member's deadline; no batch exceeds max_batch_size;
 *   - against the same trace without its offline lines (exact execution
 *     times): the online requests fare exactly the same until an online
 *     request arrives while a batch carrying offline rows occupies an
 *     instance the online work then needs (batches are not preempted), or,
 *     under the adaptive policy, until it sends a batch earlier, having
 *     decided its wait again at an instant only the job brings (a line
 *     arrives, an offline batch ends) with the measured rate fallen since.
 *     After that instant the two runs differ and nothing is claimed per
 *     request: the late ones are counted and printed;
 *   - by hand: the fill case that found queue.c's bug, and the bound of the
 *     exception: an online request arriving during an offline batch starts
 *     when it ends, or is answered 504 if that leaves no time. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "batcher/sim.h"
#include "common/error.h"

#define MS 1000000LL
#define US 1000LL

static uint64_t rnd(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static double urand(uint64_t *s) { return (double)(rnd(s) >> 11) / 9007199254740992.0; }

static uint64_t base_seed(void)
{
    const char *env = getenv("BG_TEST_SEED");
    if (env)
        return strtoull(env, NULL, 10);
    return (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 20);
}

static int trace_count(int n) { return getenv("BG_TEST_SEED") ? 1 : n; }

/* ---- random traces ---- */

struct entry {
    struct sim_request r;
    int seq;   /* generation order: ties in arrival keep it */
};

static int entry_cmp(const void *a, const void *b)
{
    const struct entry *x = a, *y = b;
    if (x->r.arrival_ns != y->r.arrival_ns)
        return x->r.arrival_ns < y->r.arrival_ns ? -1 : 1;
    return x->seq - y->seq;
}

/* A random model and trace for `seed`: online requests at 0.1x to 2x of
 * what the instances do at full batches (bursty one time in four), 2 of 3
 * with budgets of 1 to 50 ms, priorities 0 to 3; and 0 to 3 jobs, each of
 * 1 to 150 lines of random rows starting at a random instant, submitted at
 * once or one line every few hundred microseconds as the jobs runner
 * refills. Exact: jitter 0 and integer a, b, so the fitted latency model is
 * exact (else one trace in two has 30% jitter). The caller frees. */
static struct sim_request *make_mixed(uint64_t seed, const char *policy, bool exact,
                                      struct sim_config *c, int *np)
{
    uint64_t s = seed * 2654435761u + 11;
    memset(c, 0, sizeof *c);
    struct model_batching *b = &c->batching;
    b->max_batch_size = 1 + (int)(rnd(&s) % 32);
    b->max_queue_delay_us = (int64_t)(rnd(&s) % 5000);
    b->max_queue_size = 1 + (int)(rnd(&s) % 200);
    b->default_priority = 1 + (int)(rnd(&s) % 2);
    b->priority_aging_ms = rnd(&s) % 2 ? 50 : 0;
    if (rnd(&s) % 3 == 0) {
        b->npreferred = 1;
        b->preferred[0] = 1 + (int)(rnd(&s) % (uint64_t)b->max_batch_size);
    }
    snprintf(b->policy, sizeof b->policy, "%s", policy);
    c->instances = 1 + (int)(rnd(&s) % 3);
    c->exec_a_ns = (double)(200000 + rnd(&s) % 2000000);
    c->exec_b_ns = (double)(rnd(&s) % 200000);
    c->guard_ns = rnd(&s) % 3 == 0 ? (int64_t)(rnd(&s) % MS) : 0;
    c->jitter = exact || rnd(&s) % 2 ? 0 : 0.3;
    c->seed = seed + 1;
    c->check = true;
    double full = c->exec_a_ns + c->exec_b_ns * b->max_batch_size;
    double cap_rows_per_ns = c->instances * b->max_batch_size / full;
    double load = 0.1 + 1.9 * urand(&s);
    int n_on = 30 + (int)(rnd(&s) % 220);
    int njobs = (int)(rnd(&s) % 4);
    int lines[3], cap = n_on;
    for (int j = 0; j < njobs; j++)
        cap += lines[j] = 1 + (int)(rnd(&s) % 150);
    struct entry *e = calloc((size_t)cap, sizeof *e);
    int n = 0;
    int64_t t = 0;
    int max_rows = 1 + (int)(rnd(&s) % (uint64_t)b->max_batch_size);
    double mean_rows = (1 + max_rows) / 2.0;
    bool bursty = rnd(&s) % 4 == 0;
    for (int i = 0; i < n_on; i++) {
        double gap = -mean_rows / (cap_rows_per_ns * load) * __builtin_log(1.0 - urand(&s));
        if (bursty && rnd(&s) % 20 == 0)
            gap += 20.0 * MS;
        t += (int64_t)gap;
        struct sim_request *r = &e[n].r;
        r->arrival_ns = t;
        r->rows = 1 + (int)(rnd(&s) % (uint64_t)max_rows);
        r->budget_ns = rnd(&s) % 3 ? (int64_t)(1 + rnd(&s) % 50) * MS : 0;
        r->priority = (int)(rnd(&s) % 4);
        e[n].seq = n;
        n++;
    }
    int64_t span = t > 0 ? t : 1;
    for (int j = 0; j < njobs; j++) {
        int64_t at = (int64_t)(urand(&s) * (double)span);
        int64_t every = rnd(&s) % 2 ? (int64_t)(rnd(&s) % (500 * US)) : 0;
        int off_rows = 1 + (int)(rnd(&s) % (uint64_t)b->max_batch_size);
        for (int k = 0; k < lines[j]; k++) {
            struct sim_request *r = &e[n].r;
            r->arrival_ns = at + every * k;
            r->rows = 1 + (int)(rnd(&s) % (uint64_t)off_rows);
            r->offline = true;
            e[n].seq = n;
            n++;
        }
    }
    qsort(e, (size_t)n, sizeof *e, entry_cmp);
    struct sim_request *out = calloc((size_t)n, sizeof *out);
    for (int i = 0; i < n; i++)
        out[i] = e[i].r;
    free(e);
    *np = n;
    return out;
}

/* ---- the rules at every batch ---- */

struct coverage {
    long traces_with_offline, gap_batches, fill_batches, offline_rows;
};

static void run_rules(const char *policy, int traces)
{
    uint64_t seed0 = base_seed();
    struct coverage cov = {0};
    for (int k = 0; k < trace_count(traces); k++) {
        uint64_t seed = seed0 + (uint64_t)k;
        struct sim_config c;
        int n;
        struct sim_request *r = make_mixed(seed, policy, false, &c, &n);
        struct sim_stats st;
        if (sim_run(&c, r, n, &st) != 0)
            fail_msg("policy %s, trace seed %llu (replay with BG_TEST_SEED=%llu): %s", policy,
                     (unsigned long long)seed, (unsigned long long)seed, st.violation);
        cov.traces_with_offline += st.offline_rows > 0;
        cov.gap_batches += st.offline_gap_batches;
        cov.fill_batches += st.fill_batches;
        cov.offline_rows += st.offline_rows;
        free(r);
    }
    if (getenv("BG_TEST_SEED"))
        return;
    print_message("%s: %ld traces with offline rows, %ld offline rows; %ld offline batches "
                  "cut while online work waited, %ld online batches carrying offline rows\n",
                  policy, cov.traces_with_offline, cov.offline_rows, cov.gap_batches,
                  cov.fill_batches);
    /* The rules were met, not only passed vacuously. The adaptive policy
     * never waits as long as a batch takes (its wait is under half the
     * setup time a), so offline rows never run while it holds online work
     * back: they run only when none is queued, or in its batches' empty
     * rows. */
    if (strcmp(policy, "adaptive") != 0)
        assert_true(cov.gap_batches > traces / 10);
    assert_true(cov.fill_batches > traces / 10);
}

static void test_offline_rules_adaptive(void **state)
{
    (void)state;
    run_rules("adaptive", 1000);
}

static void test_offline_rules_deadline(void **state)
{
    (void)state;
    run_rules("deadline", 1000);
}

static void test_offline_rules_fixed_delay(void **state)
{
    (void)state;
    run_rules("fixed_delay", 1000);
}

/* ---- against the same trace without its offline lines ---- */

/* The online requests of r, in order; map[i] is the index in r of the i-th. */
static struct sim_request *online_only(const struct sim_request *r, int n, int *map, int *nb)
{
    struct sim_request *b = calloc((size_t)(n ? n : 1), sizeof *b);
    int k = 0;
    for (int i = 0; i < n; i++)
        if (!r[i].offline) {
            map[k] = i;
            b[k++] = r[i];
        }
    *nb = k;
    return b;
}

/* When a request's fate was sealed: its start if computed, else its answer. */
static int64_t fate_at(const struct sim_request *r) { return r->status == 0 ? r->start_ns : r->done_ns; }

static bool is_late(const struct sim_request *r)
{
    return r->status == BG_EDEADLINE ||
           (r->status == 0 && r->budget_ns && r->done_ns > r->arrival_ns + r->budget_ns);
}

struct divergence {
    int64_t t;        /* the first instant an online request fares differently */
    int req;          /* that request, in the full trace */
    bool w_later;     /* with offline rows it starts (or is answered) later */
};

/* The first online request whose fate differs between the run with the
 * offline lines (w, the full trace) and without (b, map): false if none. */
static bool first_divergence(const struct sim_request *w, const struct sim_request *b,
                             const int *map, int nb, struct divergence *d)
{
    d->t = INT64_MAX;
    d->req = -1;
    d->w_later = false;
    for (int k = 0; k < nb; k++) {
        const struct sim_request *x = &w[map[k]], *y = &b[k];
        if (x->status == y->status && fate_at(x) == fate_at(y))
            continue;
        int64_t t = fate_at(x) < fate_at(y) ? fate_at(x) : fate_at(y);
        if (t < d->t) {
            d->t = t;
            d->req = map[k];
            d->w_later = fate_at(y) == t;
        }
    }
    return d->t != INT64_MAX;
}

struct span {
    int64_t start, end;
    bool offline;     /* it carried offline rows */
};

/* Each batch's span, from its requests. */
static struct span *batch_spans(const struct sim_request *r, int n, int nbatches)
{
    struct span *sp = calloc((size_t)(nbatches ? nbatches : 1), sizeof *sp);
    for (int i = 0; i < n; i++) {
        if (r[i].batch < 0)
            continue;
        struct span *p = &sp[r[i].batch];
        p->start = r[i].start_ns;
        p->end = r[i].done_ns;
        p->offline |= r[i].batch_offline_rows > 0;
    }
    return sp;
}

static bool online_arrival_in(const struct sim_request *r, int n, int64_t after, int64_t upto)
{
    for (int i = 0; i < n; i++)
        if (!r[i].offline && r[i].arrival_ns > after && r[i].arrival_ns <= upto)
            return true;
    return false;
}

/* Why the run with offline rows may first differ at d->t (see the top of
 * the file): NULL when explained, else what is wrong.
 *   Later with offline rows: at d->t every instance the online work needed
 *   was busy, one at least with a batch carrying offline rows, and the
 *   online queue changed (an arrival) while each such batch ran: had it
 *   not, the batch would have been cut to end before that work was due.
 *   Earlier (adaptive only): after the request arrived the run with
 *   offline rows had an event the other has not (an offline batch ended or
 *   a line arrived), where the adaptive wait was decided again with the
 *   rate fallen since, and so ended sooner. */
static const char *divergence_unexplained(const struct sim_request *w, int n,
                                          const struct sim_stats *st, const struct divergence *d,
                                          bool adaptive, char *why, size_t cap)
{
    struct span *sp = batch_spans(w, n, st->batches);
    const char *res = NULL;
    if (d->w_later) {
        int blocking = 0;
        for (int j = 0; j < st->batches && !res; j++) {
            if (!sp[j].offline || sp[j].start >= d->t || sp[j].end <= d->t)
                continue;
            blocking++;
            if (!online_arrival_in(w, n, sp[j].start, d->t)) {
                snprintf(why, cap, "request %d starts later with offline rows than without "
                         "(first at %lld): batch %d (offline rows, %lld to %lld) held an "
                         "instance while no online request arrived", d->req, (long long)d->t,
                         j, (long long)sp[j].start, (long long)sp[j].end);
                res = why;
            }
        }
        if (!res && blocking == 0) {
            snprintf(why, cap, "request %d starts later with offline rows than without (at "
                     "%lld), and no batch carrying offline rows ran then", d->req,
                     (long long)d->t);
            res = why;
        }
    } else {
        bool extra_event = false;
        int64_t since = w[d->req].arrival_ns;
        for (int j = 0; j < st->batches; j++)
            extra_event |= sp[j].offline && sp[j].end > since && sp[j].end <= d->t;
        for (int i = 0; i < n; i++)
            extra_event |= w[i].offline && w[i].arrival_ns > since && w[i].arrival_ns <= d->t;
        if (!adaptive || !extra_event) {
            snprintf(why, cap, "request %d starts earlier with offline rows than without "
                     "(at %lld)%s", d->req, (long long)d->t,
                     adaptive ? ", no offline work met since it arrived" : "");
            res = why;
        }
    }
    free(sp);
    return res;
}

struct compare_totals {
    long traces, identical, later, earlier, online;
    long late_with, late_without, late_only_with, late_only_without;
    long late_only_with_blocked;   /* ... arriving while a batch carrying offline rows ran */
};

/* Whether r[i] arrived while a batch carrying offline rows ran. */
static bool arrived_during_offline(const struct sim_request *r, int i, const struct span *sp,
                                   int nbatches)
{
    for (int j = 0; j < nbatches; j++)
        if (sp[j].offline && sp[j].start < r[i].arrival_ns && sp[j].end > r[i].arrival_ns)
            return true;
    return false;
}

static void compare_one(uint64_t seed, const char *policy, struct compare_totals *tot)
{
    struct sim_config c;
    int n, nb;
    struct sim_request *w = make_mixed(seed, policy, true, &c, &n);
    int *map = calloc((size_t)(n ? n : 1), sizeof *map);
    struct sim_request *b = online_only(w, n, map, &nb);
    struct sim_stats sw, sb;
    if (sim_run(&c, w, n, &sw) != 0 || sim_run(&c, b, nb, &sb) != 0)
        fail_msg("policy %s, trace seed %llu (replay with BG_TEST_SEED=%llu): %s", policy,
                 (unsigned long long)seed, (unsigned long long)seed,
                 sw.violation[0] ? sw.violation : sb.violation);
    struct divergence d;
    tot->traces++;
    if (!first_divergence(w, b, map, nb, &d)) {
        tot->identical++;
    } else {
        char why[256];
        if (divergence_unexplained(w, n, &sw, &d, strcmp(policy, "adaptive") == 0, why,
                                   sizeof why))
            fail_msg("policy %s, trace seed %llu (replay with BG_TEST_SEED=%llu): %s", policy,
                     (unsigned long long)seed, (unsigned long long)seed, why);
        *(d.w_later ? &tot->later : &tot->earlier) += 1;
    }
    struct span *sp = batch_spans(w, n, sw.batches);
    for (int k = 0; k < nb; k++) {
        bool lw = is_late(&w[map[k]]), lb = is_late(&b[k]);
        tot->online++;
        tot->late_with += lw;
        tot->late_without += lb;
        tot->late_only_with += lw && !lb;
        tot->late_only_without += lb && !lw;
        tot->late_only_with_blocked += lw && !lb && arrived_during_offline(w, map[k], sp,
                                                                             sw.batches);
    }
    free(sp);
    free(map);
    free(b);
    free(w);
}

static void run_compare(const char *policy, int traces)
{
    uint64_t seed0 = base_seed();
    struct compare_totals tot = {0};
    for (int k = 0; k < trace_count(traces); k++)
        compare_one(seed0 + (uint64_t)k, policy, &tot);
    if (getenv("BG_TEST_SEED"))
        return;
    print_message("%s, with / without the offline lines over %ld traces: online fates "
                  "identical in %ld, later first in %ld, earlier first in %ld; of %ld online "
                  "requests late %ld / %ld (%ld only with, %ld of them arrived during a batch "
                  "carrying offline rows; %ld only without)\n",
                  policy, tot.traces, tot.identical, tot.later, tot.earlier, tot.online,
                  tot.late_with,
                  tot.late_without, tot.late_only_with, tot.late_only_with_blocked,
                  tot.late_only_without);
    /* The comparison met both outcomes, not only one. */
    assert_true(tot.identical > traces / 20);
    assert_true(tot.later > traces / 20);
}

static void test_offline_changes_nothing_until_blocked_adaptive(void **state)
{
    (void)state;
    run_compare("adaptive", 800);
}

static void test_offline_changes_nothing_until_blocked_deadline(void **state)
{
    (void)state;
    run_compare("deadline", 800);
}

static void test_offline_changes_nothing_until_blocked_fixed_delay(void **state)
{
    (void)state;
    run_compare("fixed_delay", 800);
}

/* ---- by hand ---- */

/* One instance, exec(R) = 1 ms + 0.1 ms x R exactly, max_batch_size
 * `max`, the deadline policy sending online work as soon as the instance is
 * free (max_queue_delay 0: a longer one would hold a lone request to its
 * latest start, the instant expiry calls it hopeless). */
static void hand_config(struct sim_config *c, int max)
{
    memset(c, 0, sizeof *c);
    c->batching.max_batch_size = max;
    c->batching.max_queue_delay_us = 0;
    c->batching.max_queue_size = 100;
    c->batching.default_priority = 1;
    snprintf(c->batching.policy, sizeof c->batching.policy, "deadline");
    c->instances = 1;
    c->exec_a_ns = 1.0 * MS;
    c->exec_b_ns = 0.1 * MS;
    c->check = true;
}

/* The bug these tests found in queue.c: offline rows filled the empty rows
 * of an online batch while an online request was left queued behind it,
 * and made it miss the instant it had to start by. A (3 rows, priority 1)
 * and B (2 rows, priority 2, due at 2.55 ms) cannot share a batch of 4: A
 * goes, ending at 1.3 ms, and B must start by 2.55 - exec(2) = 1.35 ms. One
 * offline row in A's empty row made it end at 1.4 ms: B was answered 504.
 * Now the fill waits for an empty queue: B starts at 1.3 ms, alone (with
 * the row its batch would end past B's deadline), then the offline row. */
static void test_fill_never_delays_a_request_left_queued(void **state)
{
    (void)state;
    struct sim_config c;
    hand_config(&c, 4);
    struct sim_request r[3] = {
        {.arrival_ns = 0, .rows = 1, .offline = true},
        {.arrival_ns = 0, .rows = 3, .priority = 1},
        {.arrival_ns = 0, .rows = 2, .priority = 2, .budget_ns = 2550 * US},
    };
    struct sim_stats st;
    if (sim_run(&c, r, 3, &st) != 0)
        fail_msg("%s", st.violation);
    assert_int_equal(r[1].start_ns, 0);
    assert_int_equal(r[1].batch_offline_rows, 0);
    assert_int_equal(r[1].done_ns, 1300 * US);
    assert_int_equal(r[2].status, 0);
    assert_int_equal(r[2].start_ns, 1300 * US);
    assert_int_equal(r[2].batch_offline_rows, 0);
    assert_int_equal(r[2].done_ns, 2500 * US);
    assert_int_equal(r[0].start_ns, 2500 * US);
}

/* The exception, and its bound: batches are not preempted. A backlog keeps
 * the one instance busy with full offline batches of 8 rows (1.8 ms each).
 * An online request arriving at any point of one starts the instant it
 * ends, so it waits at most exec(max_batch_size), and then runs with
 * offline rows filling its batch only as far as its own deadline allows.
 * With a budget shorter than the rest of the batch plus its own row, it is
 * answered 504 when it becomes hopeless, never computed late. */
static void test_online_waits_for_the_running_offline_batch_only(void **state)
{
    (void)state;
    struct sim_config c;
    hand_config(&c, 8);
    enum { LINES = 40 };
    struct sim_request r[LINES + 1];
    int64_t full = 1800 * US;
    /* Arrivals inside the fourth offline batch, off the grid of the budgets
     * so that none falls exactly on its latest start. */
    for (int64_t at = 3 * full + 50 * US; at < 4 * full; at += 100 * US)
        for (int64_t budget = 1 * MS; budget <= 5 * MS; budget += 500 * US) {
            memset(r, 0, sizeof r);
            for (int i = 0; i < LINES; i++)
                r[i] = (struct sim_request){.rows = 1, .offline = true};
            struct sim_request *on = &r[LINES];
            *on = (struct sim_request){.arrival_ns = at, .rows = 1, .budget_ns = budget};
            struct sim_stats st;
            if (sim_run(&c, r, LINES + 1, &st) != 0)
                fail_msg("arrival %lld, budget %lld: %s", (long long)at, (long long)budget,
                         st.violation);
            int64_t end = 4 * full;                /* of the batch running at `at` */
            int64_t need = end - at + 1100 * US;   /* its rest, then exec(1) */
            if (need <= budget) {
                assert_int_equal(on->status, 0);
                assert_int_equal(on->start_ns, end);
                assert_true(on->start_ns - on->arrival_ns <= full);
                assert_true(on->done_ns <= at + budget);
            } else {
                assert_int_equal(on->status, BG_EDEADLINE);
                assert_true(on->done_ns <= end);
            }
        }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_offline_rules_adaptive),
        cmocka_unit_test(test_offline_rules_deadline),
        cmocka_unit_test(test_offline_rules_fixed_delay),
        cmocka_unit_test(test_offline_changes_nothing_until_blocked_adaptive),
        cmocka_unit_test(test_offline_changes_nothing_until_blocked_deadline),
        cmocka_unit_test(test_offline_changes_nothing_until_blocked_fixed_delay),
        cmocka_unit_test(test_fill_never_delays_a_request_left_queued),
        cmocka_unit_test(test_online_waits_for_the_running_offline_batch_only),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

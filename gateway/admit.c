/* admit.c - see admit.h.
 *
 * The rate as a generic cell rate algorithm: `tat` is when the bucket will
 * be full again. A request of n rows costs n / rate seconds; it fits when,
 * after paying, the bucket would be at most one second (its depth) away
 * from full: max(tat, now) + cost - depth <= now. A request larger than one
 * second's worth fits only into a full bucket (tat <= now), so it is
 * admitted, never refused for good, and its debt delays the next ones: the
 * long-run rate holds either way. */
#include "gateway/admit.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ADMIT_NS 1000000000LL
/* The bucket's depth: one second's worth of rows. */
#define ADMIT_DEPTH_NS ADMIT_NS
/* A cost past this is a rate too small to matter; it keeps int64 from overflowing. */
#define ADMIT_COST_MAX_NS (INT64_C(1) << 60)
/* The token window: 60 one-second slots. */
#define ADMIT_SLOTS 60

/* LLM tokens of the last minute, a slot per second, and of the UTC day;
 * under `mu` (token quotas are checked once per LLM call, not per row). */
struct admit_tokens {
    pthread_mutex_t mu;
    int64_t slot[ADMIT_SLOTS];        /* tokens used in second s, at slot[s % ADMIT_SLOTS] */
    int64_t slot_sec[ADMIT_SLOTS];    /* which second each slot holds */
    int64_t reserved;                 /* estimates of the calls in flight */
    int64_t day, day_used;            /* the UTC day (unix s / 86400) and its tokens */
};

struct admit_tenant {
    _Alignas(64) _Atomic int inflight;
    _Atomic int64_t tat;              /* ns (now_ns clock); 0: full since forever */
    int max_inflight;                 /* 0: not counted */
    double rate;                      /* rows per second; 0: unlimited */
    int64_t tpm, tpd;                 /* tokens_per_minute, tokens_per_day; 0: unlimited */
    struct admit_tokens *tok;         /* NULL without token quotas */
};

struct admit {
    const struct tenants_config *t;
    struct admit_tenant *ten;         /* [t->n] */
};

struct admit *admit_new(const struct tenants_config *t, struct error *err)
{
    struct admit *a = calloc(1, sizeof *a);
    size_t bytes = ((size_t)t->n * sizeof(struct admit_tenant) + 63) / 64 * 64;
    if (a)
        a->ten = aligned_alloc(64, bytes);
    if (!a || !a->ten) {
        free(a);
        error_set(err, BG_ENOMEM, "out of memory for the tenants' admission");
        return NULL;
    }
    memset(a->ten, 0, bytes);
    a->t = t;
    for (int i = 0; i < t->n; i++) {
        a->ten[i].max_inflight = t->t[i].max_inflight;
        a->ten[i].rate = t->t[i].rate_rows_per_s;
        a->ten[i].tpm = t->t[i].tokens_per_minute;
        a->ten[i].tpd = t->t[i].tokens_per_day;
        if (!a->ten[i].tpm && !a->ten[i].tpd)
            continue;
        if (!(a->ten[i].tok = calloc(1, sizeof *a->ten[i].tok))) {
            admit_free(a);
            error_set(err, BG_ENOMEM, "out of memory for the tenants' admission");
            return NULL;
        }
        pthread_mutex_init(&a->ten[i].tok->mu, NULL);
    }
    return a;
}

void admit_free(struct admit *a)
{
    if (!a)
        return;
    for (int i = 0; a->ten && i < a->t->n; i++)
        if (a->ten[i].tok) {
            pthread_mutex_destroy(&a->ten[i].tok->mu);
            free(a->ten[i].tok);
        }
    free(a->ten);
    free(a);
}

static int admit_secs_up(int64_t ns)
{
    int64_t s = (ns + ADMIT_NS - 1) / ADMIT_NS;
    return s < 1 ? 1 : s > 86400 ? 86400 : (int)s;
}

/* Takes n rows from the bucket, or says when they will be there. */
static int admit_rate(struct admit_tenant *t, int rows, int64_t now, int64_t *wait_ns)
{
    double c = (double)rows / t->rate * 1e9;
    int64_t cost = c < (double)ADMIT_COST_MAX_NS ? (int64_t)ceil(c) : ADMIT_COST_MAX_NS;
    int64_t depth = cost > ADMIT_DEPTH_NS ? cost : ADMIT_DEPTH_NS;
    int64_t tat = atomic_load_explicit(&t->tat, memory_order_relaxed);
    for (;;) {
        int64_t base = tat > now ? tat : now;
        int64_t next = base + cost;
        if (next - depth > now) {
            *wait_ns = next - depth - now;
            return -1;
        }
        if (atomic_compare_exchange_weak_explicit(&t->tat, &tat, next, memory_order_relaxed,
                                                  memory_order_relaxed))
            return 0;
    }
}

/* A wait for a person to read: a bucket short of a few rows waits
 * microseconds, which "%.3f s" printed as 0.000 s. */
static void admit_fmt_wait(char *buf, size_t n, int64_t wait_ns)
{
    if (wait_ns < 1000000)
        snprintf(buf, n, "under 1 ms");
    else if (wait_ns < 1000000000)
        snprintf(buf, n, "%.0f ms", ceil((double)wait_ns / 1e6));
    else
        snprintf(buf, n, "%.3f s", (double)wait_ns / 1e9);
}

int admit_enter(struct admit *a, int tenant, int rows, int64_t now_ns, struct admit_refusal *why)
{
    if (tenant < 0 || tenant >= a->t->n)
        tenant = 0;
    struct admit_tenant *t = &a->ten[tenant];
    const char *name = a->t->t[tenant].name;
    why->no_retry = false;
    if (t->max_inflight > 0) {
        int n = atomic_fetch_add_explicit(&t->inflight, 1, memory_order_relaxed) + 1;
        if (n > t->max_inflight) {
            atomic_fetch_sub_explicit(&t->inflight, 1, memory_order_relaxed);
            why->reason = "max_inflight";
            why->retry_after_s = 1;
            snprintf(why->msg, sizeof why->msg, "tenant \"%s\" has %d requests in flight, its "
                     "max_inflight", name, t->max_inflight);
            return -BG_ETENANTLIMIT;
        }
    }
    int64_t wait;
    if (t->rate > 0 && admit_rate(t, rows, now_ns, &wait) < 0) {
        if (t->max_inflight > 0)
            atomic_fetch_sub_explicit(&t->inflight, 1, memory_order_relaxed);
        why->reason = "rate_rows_per_s";
        why->retry_after_s = admit_secs_up(wait);
        char when[32];
        admit_fmt_wait(when, sizeof when, wait);
        snprintf(why->msg, sizeof why->msg, "tenant \"%s\" is over its rate_rows_per_s (%g): "
                 "the request's %d row%s fit in %s", name, t->rate, rows, rows == 1 ? "" : "s",
                 when);
        return -BG_ETENANTLIMIT;
    }
    return 0;
}

void admit_leave(struct admit *a, int tenant)
{
    if (tenant < 0 || tenant >= a->t->n)
        tenant = 0;
    if (a->ten[tenant].max_inflight > 0)
        atomic_fetch_sub_explicit(&a->ten[tenant].inflight, 1, memory_order_relaxed);
}

void admit_refund(struct admit *a, int tenant, int rows)
{
    if (tenant < 0 || tenant >= a->t->n)
        tenant = 0;
    struct admit_tenant *t = &a->ten[tenant];
    if (t->rate <= 0 || rows <= 0)
        return;
    double c = (double)rows / t->rate * 1e9;
    int64_t cost = c < (double)ADMIT_COST_MAX_NS ? (int64_t)ceil(c) : ADMIT_COST_MAX_NS;
    /* A tat below now reads as now (admit_rate): no credit past the bucket. */
    atomic_fetch_sub_explicit(&t->tat, cost, memory_order_relaxed);
}

int admit_inflight(const struct admit *a, int tenant)
{
    return tenant >= 0 && tenant < a->t->n
               ? atomic_load_explicit(&a->ten[tenant].inflight, memory_order_relaxed)
               : 0;
}

/* ---- LLM tokens ---- */

/* Tokens used in the 60 s ending with second `sec`. Under tk->mu. */
static int64_t admit_window(const struct admit_tokens *tk, int64_t sec)
{
    int64_t sum = 0;
    for (int i = 0; i < ADMIT_SLOTS; i++)
        if (tk->slot_sec[i] > sec - ADMIT_SLOTS && tk->slot_sec[i] <= sec)
            sum += tk->slot[i];
    return sum;
}

/* Seconds until `need` tokens of the window have aged out. Under tk->mu. */
static int admit_window_wait(const struct admit_tokens *tk, int64_t sec, int64_t need)
{
    for (int64_t s = sec - ADMIT_SLOTS + 1; s <= sec; s++) {
        const int i = (int)(((s % ADMIT_SLOTS) + ADMIT_SLOTS) % ADMIT_SLOTS);
        if (tk->slot_sec[i] == s)
            need -= tk->slot[i];
        if (need <= 0)
            return (int)(s + ADMIT_SLOTS - sec);
    }
    return ADMIT_SLOTS;
}

static void admit_day_roll(struct admit_tokens *tk, int64_t unix_s)
{
    int64_t day = unix_s / 86400;
    if (day != tk->day) {
        tk->day = day;
        tk->day_used = 0;
    }
}

int admit_tokens_enter(struct admit *a, int tenant, int64_t estimate, int64_t now_ns,
                       int64_t unix_s, struct admit_refusal *why)
{
    if (tenant < 0 || tenant >= a->t->n)
        tenant = 0;
    struct admit_tenant *t = &a->ten[tenant];
    struct admit_tokens *tk = t->tok;
    if (!tk)
        return 0;
    const char *name = a->t->t[tenant].name;
    int64_t sec = now_ns / ADMIT_NS;
    int rc = 0;
    why->no_retry = false;
    pthread_mutex_lock(&tk->mu);
    admit_day_roll(tk, unix_s);
    if (t->tpd > 0 && tk->day_used + tk->reserved + estimate > t->tpd &&
        (tk->day_used + tk->reserved > 0)) {
        why->reason = "tokens_per_day";
        why->retry_after_s = (int)(86400 - unix_s % 86400);
        why->no_retry = true;
        snprintf(why->msg, sizeof why->msg, "tenant \"%s\" has used %lld of its tokens_per_day "
                 "(%lld, with %lld reserved by calls in flight), and the call's estimate of %lld "
                 "(its prompt and max_tokens) would pass it; the day ends at 00:00 UTC",
                 name, (long long)tk->day_used, (long long)t->tpd, (long long)tk->reserved,
                 (long long)estimate);
        rc = -BG_ETENANTLIMIT;
    } else if (t->tpm > 0) {
        int64_t used = admit_window(tk, sec);
        /* A call larger than the whole quota goes into an empty window only. */
        if (used + tk->reserved + estimate > t->tpm && used + tk->reserved > 0) {
            /* What must age out; all of it for a call larger than the quota. */
            int64_t over = estimate > t->tpm ? used + tk->reserved
                                             : used + tk->reserved + estimate - t->tpm;
            why->reason = "tokens_per_minute";
            why->retry_after_s = admit_window_wait(tk, sec, over);
            snprintf(why->msg, sizeof why->msg, "tenant \"%s\" has used %lld tokens in the "
                     "last minute and reserved %lld, and the call's estimate of %lld would pass "
                     "its tokens_per_minute (%lld)", name, (long long)used,
                     (long long)tk->reserved, (long long)estimate, (long long)t->tpm);
            rc = -BG_ETENANTLIMIT;
        }
    }
    if (rc == 0)
        tk->reserved += estimate;
    pthread_mutex_unlock(&tk->mu);
    return rc;
}

/* `used` tokens in second `sec` of the window. Under tk->mu. */
static void admit_slot_add(struct admit_tokens *tk, int64_t sec, int64_t used)
{
    int i = (int)(((sec % ADMIT_SLOTS) + ADMIT_SLOTS) % ADMIT_SLOTS);
    if (tk->slot_sec[i] != sec) {
        tk->slot_sec[i] = sec;
        tk->slot[i] = 0;
    }
    tk->slot[i] += used;
}

void admit_tokens_leave(struct admit *a, int tenant, int64_t estimate, int64_t used,
                        int64_t now_ns, int64_t unix_s)
{
    if (tenant < 0 || tenant >= a->t->n)
        tenant = 0;
    struct admit_tokens *tk = a->ten[tenant].tok;
    if (!tk)
        return;
    pthread_mutex_lock(&tk->mu);
    tk->reserved -= estimate;
    if (tk->reserved < 0)
        tk->reserved = 0;
    admit_slot_add(tk, now_ns / ADMIT_NS, used);
    admit_day_roll(tk, unix_s);
    tk->day_used += used;
    pthread_mutex_unlock(&tk->mu);
}

void admit_tokens_restore(struct admit *a, int tenant, int64_t used, int64_t ago_s,
                          int64_t now_ns, int64_t unix_s)
{
    if (tenant < 0 || tenant >= a->t->n || used <= 0 || ago_s < 0)
        return;
    struct admit_tokens *tk = a->ten[tenant].tok;
    if (!tk)
        return;
    pthread_mutex_lock(&tk->mu);
    admit_day_roll(tk, unix_s);
    if ((unix_s - ago_s) / 86400 == tk->day)
        tk->day_used += used;
    if (ago_s < ADMIT_SLOTS)
        admit_slot_add(tk, now_ns / ADMIT_NS - ago_s, used);
    pthread_mutex_unlock(&tk->mu);
}

void admit_tokens_used(struct admit *a, int tenant, int64_t now_ns, int64_t unix_s,
                       int64_t *minute, int64_t *day)
{
    *minute = *day = 0;
    if (tenant < 0 || tenant >= a->t->n || !a->ten[tenant].tok)
        return;
    struct admit_tokens *tk = a->ten[tenant].tok;
    pthread_mutex_lock(&tk->mu);
    admit_day_roll(tk, unix_s);
    *minute = admit_window(tk, now_ns / ADMIT_NS);
    *day = tk->day_used;
    pthread_mutex_unlock(&tk->mu);
}

bool admit_has_token_quota(const struct admit *a, int tenant)
{
    return tenant >= 0 && tenant < a->t->n && a->ten[tenant].tok != NULL;
}

/* picker.c - the endpoint picker (picker.h; the formula in words:
 * docs/LLM.md "Picking an endpoint").
 *
 * The affinity table: a fixed array of affinity_entries slots allocated at
 * picker_new, one per block hash, each with its PICKER_HOLDERS latest
 * endpoints; a chained hash index over it (buckets: the next power of two
 * at or above the capacity, so chains stay short) and an LRU list through
 * it. A full table reuses its least recently recorded block. Slots link by
 * index, not pointer, so the whole table is two allocations. */
#include "serving/picker.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct picker_slot {
    uint64_t hash;                       /* 0: free */
    int32_t chain;                       /* next in the bucket, -1 none */
    int32_t prev, next;                  /* LRU list (next also links the free list) */
    int32_t holder[PICKER_HOLDERS];      /* endpoints, -1 none */
    uint32_t stamp[PICKER_HOLDERS];      /* when each was recorded (p->seq) */
    uint32_t sent;                       /* endpoints it was recorded for, listed or not, up to n */
    uint8_t pending;                     /* bit k: holder[k] is still computing it (picker.h) */
};

struct picker {
    struct picker_config cfg;
    int n;                               /* endpoints */
    int64_t stale_ns;
    pthread_mutex_t mu;                  /* everything below */
    uint64_t cursor;                     /* round robin, and the rotation that breaks ties */
    uint32_t seq;
    int *match;                          /* [n]: scratch of a pick, blocks held */
    bool pending_seen;                   /* scratch of a pick: a holder of its prefix is pending */
    double *credit;                      /* [n]: scratch, blocks held weighed by rarity */
    int *held;                           /* [n]: holder entries naming each endpoint */
    struct picker_slot *slot;            /* [cap] */
    int32_t *bucket;                     /* [mask + 1] */
    uint64_t mask;
    int cap, used;
    int32_t head, tail, free;            /* LRU: head most recent */
};

void picker_config_defaults(struct picker_config *c)
{
    *c = (struct picker_config){
        .policy = PICKER_SCORE,
        .w_queue = 1,
        .w_kv_cache = 1,
        .w_prefix = 2,
        .sat_waiting = 8,
        .sat_kv_cache = 0.9,
        .affinity_entries = 65536,
        .metrics_interval_ms = 200,
    };
}

int picker_policy_from_name(const char *name)
{
    if (!name)
        return -1;
    if (!strcmp(name, "score"))
        return PICKER_SCORE;
    if (!strcmp(name, "round_robin"))
        return PICKER_ROUND_ROBIN;
    if (!strcmp(name, "least_inflight"))
        return PICKER_LEAST_INFLIGHT;
    return -1;
}

struct picker *picker_new(const struct picker_config *cfg, int nendpoints)
{
    if (!cfg || nendpoints < 1 || cfg->affinity_entries < 1 || !(cfg->sat_waiting > 0) ||
        !(cfg->sat_kv_cache > 0) || cfg->w_queue < 0 || cfg->w_kv_cache < 0 || cfg->w_prefix < 0)
        return NULL;
    struct picker *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->cfg = *cfg;
    p->n = nendpoints;
    p->stale_ns = (int64_t)PICKER_STALE_INTERVALS * (cfg->metrics_interval_ms > 0
                                                        ? cfg->metrics_interval_ms
                                                        : 200) * 1000000;
    p->cap = cfg->affinity_entries;
    uint64_t nb = 1;
    while (nb < (uint64_t)p->cap)
        nb <<= 1;
    p->mask = nb - 1;
    p->match = calloc((size_t)nendpoints, sizeof *p->match);
    p->credit = calloc((size_t)nendpoints, sizeof *p->credit);
    p->held = calloc((size_t)nendpoints, sizeof *p->held);
    p->slot = calloc((size_t)p->cap, sizeof *p->slot);
    p->bucket = malloc(nb * sizeof *p->bucket);
    if (!p->match || !p->credit || !p->held || !p->slot || !p->bucket ||
        pthread_mutex_init(&p->mu, NULL)) {
        free(p->match);
        free(p->credit);
        free(p->held);
        free(p->slot);
        free(p->bucket);
        free(p);
        return NULL;
    }
    memset(p->bucket, 0xff, nb * sizeof *p->bucket);
    for (int i = 0; i < p->cap; i++)
        p->slot[i].next = i + 1 < p->cap ? i + 1 : -1;
    p->free = 0;
    p->head = p->tail = -1;
    return p;
}

void picker_free(struct picker *p)
{
    if (!p)
        return;
    pthread_mutex_destroy(&p->mu);
    free(p->match);
    free(p->credit);
    free(p->held);
    free(p->slot);
    free(p->bucket);
    free(p);
}

/* ---- hashing ---- */

static uint64_t picker_load64(const unsigned char *b)
{
    uint64_t w = 0;
    for (int i = 7; i >= 0; i--)
        w = w << 8 | b[i];
    return w;
}

/* xxhash64's round over each 8 bytes (a bijection of the state for each
 * word, so blocks differing in one word never collide), then splitmix64's
 * finalizer. */
static uint64_t picker_hash_block(uint64_t h, const unsigned char *b)
{
    for (int i = 0; i < PICKER_BLOCK_BYTES; i += 8) {
        h ^= picker_load64(b + i) * 0xc2b2ae3d27d4eb4full;
        h = (h << 31 | h >> 33) * 0x9e3779b185ebca87ull;
    }
    h ^= PICKER_BLOCK_BYTES;
    h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ull;
    h = (h ^ (h >> 27)) * 0x94d049bb133111ebull;
    h ^= h >> 31;
    return h ? h : 1;
}

int picker_prefix_hashes(const char *text, size_t len, uint64_t *out, int max)
{
    if (!text || max <= 0)
        return 0;
    size_t whole = len / PICKER_BLOCK_BYTES;
    int n = whole < (size_t)max ? (int)whole : max;
    uint64_t h = 0x27d4eb2f165667c5ull;
    for (int i = 0; i < n; i++) {
        h = picker_hash_block(h, (const unsigned char *)text + (size_t)i * PICKER_BLOCK_BYTES);
        out[i] = h;
    }
    return n;
}

/* ---- the affinity table (p->mu held) ---- */

static int32_t picker_find(const struct picker *p, uint64_t h)
{
    for (int32_t i = p->bucket[h & p->mask]; i >= 0; i = p->slot[i].chain)
        if (p->slot[i].hash == h)
            return i;
    return -1;
}

static void picker_lru_unlink(struct picker *p, int32_t i)
{
    struct picker_slot *s = &p->slot[i];
    if (s->prev >= 0)
        p->slot[s->prev].next = s->next;
    else
        p->head = s->next;
    if (s->next >= 0)
        p->slot[s->next].prev = s->prev;
    else
        p->tail = s->prev;
}

static void picker_lru_front(struct picker *p, int32_t i)
{
    struct picker_slot *s = &p->slot[i];
    s->prev = -1;
    s->next = p->head;
    if (p->head >= 0)
        p->slot[p->head].prev = i;
    p->head = i;
    if (p->tail < 0)
        p->tail = i;
}

/* Takes slot i out of the index and the LRU list onto the free list. */
static void picker_release(struct picker *p, int32_t i)
{
    struct picker_slot *s = &p->slot[i];
    int32_t *link = &p->bucket[s->hash & p->mask];
    while (*link != i)
        link = &p->slot[*link].chain;
    *link = s->chain;
    picker_lru_unlink(p, i);
    for (int k = 0; k < PICKER_HOLDERS; k++)
        if (s->holder[k] >= 0)
            p->held[s->holder[k]]--;
    s->hash = 0;
    s->next = p->free;
    p->free = i;
    p->used--;
}

static int32_t picker_insert(struct picker *p, uint64_t h)
{
    if (p->free < 0)
        picker_release(p, p->tail);
    int32_t i = p->free;
    struct picker_slot *s = &p->slot[i];
    p->free = s->next;
    s->hash = h;
    for (int k = 0; k < PICKER_HOLDERS; k++)
        s->holder[k] = -1;
    s->sent = 0;
    s->pending = 0;
    int32_t *b = &p->bucket[h & p->mask];
    s->chain = *b;
    *b = i;
    picker_lru_front(p, i);
    p->used++;
    return i;
}

/* Lists e as a holder of s (replacing the oldest when the list is full);
 * `sent` counts the endpoints not listed when recorded, up to n. It never
 * comes down but by picker_forget or the block's eviction: letting calls
 * that return to a listed holder bring it down fed on itself (they return
 * because the credit favours them) and piled a common prefix's calls onto
 * its listed holders again in the trace test. A holder newly listed by a
 * pending record is pending; a confirmed one stays confirmed. */
static void picker_hold(struct picker *p, struct picker_slot *s, int e, bool pending)
{
    int k, oldest = 0;
    for (k = 0; k < PICKER_HOLDERS && s->holder[k] != e; k++)
        ;
    if (k < PICKER_HOLDERS) {
        if (!pending)
            s->pending &= (uint8_t)~(1u << k);
    } else {
        for (k = 0; k < PICKER_HOLDERS && s->holder[k] >= 0; k++)
            if ((int32_t)(s->stamp[k] - s->stamp[oldest]) < 0)
                oldest = k;
        if (k == PICKER_HOLDERS)
            k = oldest;
        if (s->sent < (uint32_t)p->n)
            s->sent++;
        s->pending = (uint8_t)((s->pending & ~(1u << k)) | (unsigned)pending << k);
    }
    if (s->holder[k] != e) {
        if (s->holder[k] >= 0)
            p->held[s->holder[k]]--;
        p->held[e]++;
    }
    s->holder[k] = e;
    s->stamp[k] = ++p->seq;
}

static void picker_record_as(struct picker *p, int e, const uint64_t *blocks, int nblocks,
                             bool pending)
{
    if (!p || e < 0 || e >= p->n || !blocks)
        return;
    pthread_mutex_lock(&p->mu);
    /* Last block first, so that a prompt's leading blocks, shared by the
     * most requests, are the most recent and the last to be evicted. */
    for (int i = nblocks - 1; i >= 0; i--) {
        int32_t k = picker_find(p, blocks[i]);
        if (k < 0) {
            k = picker_insert(p, blocks[i]);
        } else {
            picker_lru_unlink(p, k);
            picker_lru_front(p, k);
        }
        picker_hold(p, &p->slot[k], e, pending);
    }
    pthread_mutex_unlock(&p->mu);
}

void picker_record(struct picker *p, int e, const uint64_t *blocks, int nblocks)
{
    picker_record_as(p, e, blocks, nblocks, false);
}

void picker_record_pending(struct picker *p, int e, const uint64_t *blocks, int nblocks)
{
    picker_record_as(p, e, blocks, nblocks, true);
}

void picker_confirm(struct picker *p, int e, const uint64_t *blocks, int nblocks)
{
    if (!p || e < 0 || e >= p->n || !blocks)
        return;
    pthread_mutex_lock(&p->mu);
    for (int i = 0; i < nblocks; i++) {
        int32_t k = picker_find(p, blocks[i]);
        if (k < 0)
            continue;
        struct picker_slot *s = &p->slot[k];
        for (int h = 0; h < PICKER_HOLDERS; h++)
            if (s->holder[h] == e)
                s->pending &= (uint8_t)~(1u << h);
    }
    pthread_mutex_unlock(&p->mu);
}

void picker_forget(struct picker *p, int e)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    /* The table is large (65,536 blocks by default) and an endpoint whose
     * scrapes time out under load comes back again and again: one that
     * holds nothing costs nothing, and the walk ends at its last entry. */
    for (int32_t i = 0; i < p->cap && e >= 0 && e < p->n && p->held[e] > 0; i++) {
        struct picker_slot *s = &p->slot[i];
        if (!s->hash)
            continue;
        bool any = false;
        for (int k = 0; k < PICKER_HOLDERS; k++) {
            if (s->holder[k] == e) {
                s->holder[k] = -1;
                p->held[e]--;
                s->pending &= (uint8_t)~(1u << k);
                if (s->sent)
                    s->sent--;
            }
            any |= s->holder[k] >= 0;
        }
        if (!any)
            picker_release(p, i);
    }
    pthread_mutex_unlock(&p->mu);
}

int picker_held(struct picker *p, int e)
{
    if (!p || e < 0 || e >= p->n)
        return 0;
    pthread_mutex_lock(&p->mu);
    int n = p->held[e];
    pthread_mutex_unlock(&p->mu);
    return n;
}

int picker_table_size(struct picker *p)
{
    pthread_mutex_lock(&p->mu);
    int n = p->used;
    pthread_mutex_unlock(&p->mu);
    return n;
}

/* m(e) for every endpoint into p->match: the deepest block e holds + 1;
 * and into p->credit the blocks of that run each weighed by how few others
 * hold it: a block sent to `sent` endpoints of which `listed` are in its
 * list may be on each unlisted one with probability (sent - listed) /
 * (n - listed); a block on every endpoint is worth nothing to choose by. */
static void picker_matches(struct picker *p, int n, const uint64_t *blocks, int nblocks)
{
    memset(p->match, 0, (size_t)n * sizeof *p->match);
    memset(p->credit, 0, (size_t)n * sizeof *p->credit);
    p->pending_seen = false;
    double cum = 0;
    for (int i = 0; i < nblocks; i++) {
        int32_t k = picker_find(p, blocks[i]);
        if (k < 0)
            continue;
        const struct picker_slot *s = &p->slot[k];
        int listed = 0;
        for (int h = 0; h < PICKER_HOLDERS; h++)
            listed += s->holder[h] >= 0 && s->holder[h] < n;
        double elsewhere = n > listed ? ((double)s->sent - listed) / (n - listed) : 0;
        double w = 1 - (elsewhere < 0 ? 0 : elsewhere > 1 ? 1 : elsewhere);
        cum += w;
        for (int h = 0; h < PICKER_HOLDERS; h++) {
            int e = s->holder[h];
            if (e >= 0 && e < n && (s->pending >> h & 1u)) {
                /* No credit yet: it is not there yet. A block most
                 * endpoints have (a common system prompt) is always being
                 * copied somewhere; that is no spill to damp. */
                p->pending_seen |= w > 0.5;
            } else if (e >= 0 && e < n) {
                p->match[e] = i + 1;
                p->credit[e] = cum;
            }
        }
    }
}

/* ---- scoring ---- */

struct picker_assess {
    double lq, lk;
    bool saturated;
};

static double picker_max0(double x)
{
    return x > 0 ? x : 0;
}

/* lq, lk and saturation of one endpoint now (picker.h). delta: calls
 * batchgate sent since the scrape less those that ended since (so the
 * scrape's numbers are moved by what batchgate knows happened after it). */
static struct picker_assess picker_assess(const struct picker *p, const struct picker_endpoint *ep,
                                          int64_t now_ns)
{
    const struct scrape_load *l = &ep->load;
    double slots = ep->slots > 0 ? ep->slots : 0;
    double inflight = picker_max0(ep->inflight);
    bool fresh = ep->scraped_ns > 0 && now_ns - ep->scraped_ns <= p->stale_ns && l->waiting >= 0;
    struct picker_assess a = {0};
    double q;
    if (fresh) {
        double delta = inflight - ep->inflight_at_scrape, unseen = picker_max0(delta);
        double running = picker_max0(l->running);
        q = l->waiting + (slots ? picker_max0(unseen - picker_max0(slots - running)) : unseen);
        if (l->kv_cache >= 0) {
            double per_call = running > 0 ? l->kv_cache / running : 0;
            a.lk = picker_max0(l->kv_cache + delta * per_call) / p->cfg.sat_kv_cache;
            a.saturated = l->kv_cache >= p->cfg.sat_kv_cache;
        } else if (slots) {
            double u = picker_max0(running + delta) / slots;
            a.lk = 0.5 * (u < 1 ? u : 1);
        }
    } else {
        q = slots ? picker_max0(inflight - slots) : inflight;
        if (slots)
            a.lk = 0.5 * (inflight < slots ? inflight / slots : 1);
    }
    if (ep->starting > q)
        q = ep->starting;
    a.lq = q / p->cfg.sat_waiting;
    a.saturated |= a.lq >= 1;
    return a;
}

bool picker_saturated(struct picker *p, const struct picker_endpoint *eps, int n, int64_t now_ns)
{
    int usable = 0;
    for (int e = 0; e < n; e++) {
        if (!eps[e].usable)
            continue;
        usable++;
        /* Whether online calls must be shed: batchgate's own batch lines
         * (offline) count only as far as the server's scrape saw them.
         * They run on idle capacity and give way to online calls; counted
         * as queue when sent since the scrape, a batch made the pool shed
         * flex calls while its servers had room. */
        struct picker_endpoint online = eps[e];
        int off = online.offline_inflight > 0 ? online.offline_inflight : 0;
        online.inflight -= off;
        online.starting = online.starting > off ? online.starting - off : 0;
        if (online.inflight_at_scrape > online.inflight)
            online.inflight_at_scrape = online.inflight;
        /* A line the server queued between scrapes is not an online call's
         * wait either: with offline.preempt it gives way, without it the
         * next scrape holds more lines back (docs/LLM.md). */
        if (online.load.waiting > 0)
            online.load.waiting = online.load.waiting > off ? online.load.waiting - off : 0;
        if (!picker_assess(p, &online, now_ns).saturated)
            return false;
    }
    return usable > 0;
}

int picker_pick_idle(const struct picker *p, const struct picker_endpoint *eps, int n,
                     const struct picker_idle *idle, const int *skip, int nskip, int64_t now_ns)
{
    int best = -1;
    double best_run = 0;
    for (int e = 0; e < n; e++) {
        const struct picker_endpoint *ep = &eps[e];
        const struct scrape_load *l = &ep->load;
        bool skipped = false;
        for (int k = 0; k < nskip; k++)
            skipped |= skip[k] == e;
        if (skipped || !ep->usable || ep->offline_inflight >= idle->max_inflight)
            continue;
        bool fresh = ep->scraped_ns > 0 && now_ns - ep->scraped_ns <= p->stale_ns &&
                     l->waiting >= 0 && l->recognised > 0;
        if (!fresh || l->waiting > 0)
            continue;
        if (picker_assess(p, ep, now_ns).saturated)
            continue;
        /* Calls ended since the scrape free their places at once (both
         * ways, as picker_assess moves it): a line may follow one that
         * just ended without waiting for the next scrape. */
        double run = picker_max0(picker_max0(l->running) +
                                 (double)(ep->inflight - ep->inflight_at_scrape));
        if (run >= idle->max_running)
            continue;
        if (best < 0 || run < best_run ||
            (run == best_run && ep->offline_inflight < eps[best].offline_inflight)) {
            best = e;
            best_run = run;
        }
    }
    return best;
}

/* Which endpoints a pick may not take: a mask or a list. */
struct picker_tried {
    unsigned mask;
    const int *list;
    int nlist;
};

static bool picker_was_tried(const struct picker_tried *t, int e)
{
    if (e < 32 && (t->mask >> e & 1u))
        return true;
    for (int i = 0; i < t->nlist; i++)
        if (t->list[i] == e)
            return true;
    return false;
}

/* Whether e at cost beats the best so far: less cost, or as much and fewer
 * of batchgate's calls in flight (else the earlier in the rotation). */
static bool picker_better(const struct picker_endpoint *eps, int e, double cost, int best,
                          double cost_best)
{
    return best < 0 || cost < cost_best ||
           (cost == cost_best && eps[e].inflight < eps[best].inflight);
}

static _Thread_local char picker_why_buf[48];

static int picker_choose(struct picker *p, const struct picker_endpoint *eps, int n,
                         const uint64_t *blocks, int nblocks, const struct picker_tried *t,
                         int64_t now_ns, const char **why)
{
    const char *reason = NULL;
    int best = -1;
    if (!p || !eps || n < 1)
        goto out;
    if (n > p->n)
        n = p->n;
    if (!blocks)
        nblocks = 0;
    pthread_mutex_lock(&p->mu);
    int start = (int)(p->cursor % (uint64_t)n);
    p->cursor++;

    if (p->cfg.policy == PICKER_ROUND_ROBIN) {
        for (int k = 0; k < n && best < 0; k++) {
            int e = (start + k) % n;
            if (eps[e].usable && !picker_was_tried(t, e))
                best = e;
        }
        if (best >= 0)
            p->cursor = (uint64_t)best + 1;
        reason = "round robin";
    } else if (p->cfg.policy == PICKER_LEAST_INFLIGHT) {
        for (int k = 0; k < n; k++) {
            int e = (start + k) % n;
            if (eps[e].usable && !picker_was_tried(t, e) &&
                (best < 0 || eps[e].inflight < eps[best].inflight))
                best = e;
        }
        reason = "least inflight";
    } else {
        bool prefix = nblocks > 0 && p->cfg.w_prefix > 0;
        if (prefix)
            picker_matches(p, n, blocks, nblocks);
        int best_sat = -1;   /* the best of the saturated ones, for when all are */
        int best_hold = -1;  /* the best unsaturated holder of the prefix */
        double cost_best = 0, cost_sat = 0, cost_hold = 0;
        for (int k = 0; k < n; k++) {
            int e = (start + k) % n;
            if (!eps[e].usable || picker_was_tried(t, e))
                continue;
            struct picker_assess a = picker_assess(p, &eps[e], now_ns);
            double L = a.lq > a.lk ? a.lq : a.lk;
            double cost = p->cfg.w_queue * a.lq + p->cfg.w_kv_cache * a.lk;
            /* The prefix's worth falls to nothing as e nears saturation
             * (L = 1), so that a hot prefix's holder passes the next call
             * to a second holder while its own queue is still short; among
             * saturated endpoints (chosen only when all are) it keeps half
             * its worth at L = 1, down to nothing at L = 2. */
            double keep = a.saturated ? 1 - L / 2 : 1 - L;
            if (prefix && p->credit[e] > 0 && keep > 0)
                cost -= p->cfg.w_prefix * p->credit[e] / nblocks * keep;
            if (a.saturated) {
                if (picker_better(eps, e, cost, best_sat, cost_sat)) {
                    best_sat = e;
                    cost_sat = cost;
                }
            } else {
                if (picker_better(eps, e, cost, best, cost_best)) {
                    best = e;
                    cost_best = cost;
                }
                if (prefix && p->credit[e] > 0 && picker_better(eps, e, cost, best_hold, cost_hold)) {
                    best_hold = e;
                    cost_hold = cost;
                }
            }
        }
        /* One new holder at a time: while an endpoint is still computing
         * this prefix for a call that left its holders, the next calls stay
         * with the holders that have it (unless all are saturated) rather
         * than start yet another copy or queue behind that prefill. */
        bool damped = prefix && p->pending_seen && best >= 0 && p->credit[best] <= 0 &&
                      best_hold >= 0;
        if (damped)
            best = best_hold;
        bool all_sat = best < 0 && best_sat >= 0;
        if (all_sat)
            best = best_sat;
        if (best >= 0)
            p->cursor = (uint64_t)best + 1;
        if (all_sat) {
            reason = "all saturated";
        } else if (best >= 0 && prefix && p->credit[best] > 0) {
            snprintf(picker_why_buf, sizeof picker_why_buf, "prefix %d/%d blocks%s", p->match[best],
                     nblocks, damped ? ", holder pending" : "");
            reason = picker_why_buf;
        } else {
            reason = "least loaded";
        }
    }
    pthread_mutex_unlock(&p->mu);
out:
    if (why)
        *why = best >= 0 ? reason : "no usable endpoint";
    return best;
}

int picker_pick(struct picker *p, const struct picker_endpoint *eps, int n, const uint64_t *blocks,
                int nblocks, unsigned tried, int64_t now_ns, const char **why)
{
    struct picker_tried t = {.mask = tried};
    return picker_choose(p, eps, n, blocks, nblocks, &t, now_ns, why);
}

int picker_pick_except(struct picker *p, const struct picker_endpoint *eps, int n,
                       const uint64_t *blocks, int nblocks, const int *tried, int ntried,
                       int64_t now_ns, const char **why)
{
    struct picker_tried t = {.list = tried, .nlist = tried ? ntried : 0};
    return picker_choose(p, eps, n, blocks, nblocks, &t, now_ns, why);
}

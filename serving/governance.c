/* governance.c - see governance.h. */
#include "serving/governance.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/jsonfmt.h"
#include "serving/tensor_json.h"
#include "common/log.h"
#include "common/tz.h"

#define GOV_DAY 86400
#define GOV_WEEK (7 * GOV_DAY)

struct gov_window {
    char name[64];
    unsigned days;                    /* bit d: Monday is 0 .. Sunday 6; all bits: every day */
    int32_t from, to;                 /* seconds after local midnight */
    double share[TENANTS_MAX];        /* by tenant index */
    double offline_share;
};

struct governance {
    char timezone[128];               /* as configured; "" the host's */
    struct tz *tz;
    struct gov_window w[GOV_WINDOWS_MAX];
    int n;
};

static const char *const gov_days[7] = {"mon", "tue", "wed", "thu", "fri", "sat", "sun"};

/* "HH:MM" or "HH:MM:SS" into seconds; -1 when malformed. */
static int32_t gov_clock(const char *s)
{
    size_t len = s ? strlen(s) : 0;
    if (len != 5 && len != 8)
        return -1;
    for (size_t i = 0; i < len; i++)
        if ((i % 3 == 2) != (s[i] == ':') || (i % 3 != 2 && (s[i] < '0' || s[i] > '9')))
            return -1;
    int h = (s[0] - '0') * 10 + s[1] - '0', m = (s[3] - '0') * 10 + s[4] - '0';
    int sec = len == 8 ? (s[6] - '0') * 10 + s[7] - '0' : 0;
    if (h > 23 || m > 59 || sec > 59)
        return -1;
    return h * 3600 + m * 60 + sec;
}

static int gov_window_parse(const json_t *o, int i, const struct tenants_config *tc,
                            const char *where, struct gov_window *w, struct error *err)
{
    char at[200];
    snprintf(at, sizeof at, "%s: windows[%d]", where, i);
    if (!json_is_object(o))
        return error_set(err, BG_ECONFIG, "%s: must be an object", at);
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)o, key, v) {
        if (strcmp(key, "name") && strcmp(key, "days") && strcmp(key, "from") &&
            strcmp(key, "to") && strcmp(key, "shares") && strcmp(key, "offline_share"))
            return error_set(err, BG_ECONFIG, "%s: unknown field \"%s\" (name, days, from, to, "
                             "shares, offline_share)", at, key);
    }
    const char *name = json_string_value(json_object_get(o, "name"));
    if (!name || !*name || strlen(name) >= sizeof w->name)
        return error_set(err, BG_ECONFIG, "%s.name: a name of 1 to %zu characters is required",
                         at, sizeof w->name - 1);
    /* It is written in the log and the metrics, as a tenant's name is: kept
     * as plain (a newline in it wrote a forged log line). */
    for (const char *p = name; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              *p == '-' || *p == '_' || *p == '.'))
            return error_set(err, BG_ECONFIG, "%s.name: may hold only letters, digits, '-', '_' "
                             "and '.' (it names the window in logs)", at);
    snprintf(w->name, sizeof w->name, "%s", name);
    json_t *days = json_object_get(o, "days");
    w->days = 0x7f;
    if (days) {
        if (!json_is_array(days) || json_array_size(days) == 0)
            return error_set(err, BG_ECONFIG, "%s.days: a non-empty list of \"mon\" ... \"sun\" "
                             "(or leave it out: every day)", at);
        w->days = 0;
        size_t k;
        json_t *d;
        json_array_foreach(days, k, d) {
            int found = -1;
            for (int j = 0; j < 7; j++)
                if (json_is_string(d) && strcmp(json_string_value(d), gov_days[j]) == 0)
                    found = j;
            if (found < 0)
                return error_set(err, BG_ECONFIG, "%s.days[%zu]: not one of \"mon\", \"tue\", "
                                 "\"wed\", \"thu\", \"fri\", \"sat\", \"sun\"", at, k);
            if (w->days & (1u << found))   /* a typo for another day, most likely */
                return error_set(err, BG_ECONFIG, "%s.days[%zu]: \"%s\" a second time", at, k,
                                 gov_days[found]);
            w->days |= 1u << found;
        }
    }
    static const char *const ends[] = {"from", "to"};
    for (int e = 0; e < 2; e++) {
        json_t *given = json_object_get(o, ends[e]);
        int c = gov_clock(json_string_value(given));
        if (c < 0)   /* missing, or given but not a time of day: said apart */
            return error_set(err, BG_ECONFIG, given ? "%s.%s: not a time of day: \"HH:MM\" or "
                                                  "\"HH:MM:SS\", 00:00 to 23:59:59 (local time)"
                                                : "%s.%s: missing (\"HH:MM\" or \"HH:MM:SS\", "
                                                  "local time)", at, ends[e]);
        *(e ? &w->to : &w->from) = c;
    }
    json_t *sh = json_object_get(o, "shares");
    if (sh && !json_is_object(sh))
        return error_set(err, BG_ECONFIG, "%s.shares: an object of tenant: share", at);
    double sum = 0;
    json_object_foreach(sh, key, v) {
        int t = tenants_find(tc, key);
        if (t < 0)
            return error_set(err, BG_ECONFIG, "%s.shares: no tenant \"%s\" (tenants[] names them)",
                             at, key);
        double x = json_number_value(v);
        if (!json_is_number(v) || x < 0 || x > 1)
            return error_set(err, BG_ECONFIG, "%s.shares.%s: a number from 0 to 1", at, key);
        /* As at start for the tenant's own share: GET /v2/governance said
         * 0.8 for a tenant its limit held to 0.4. */
        double limit = tc->t[t].limit > 0 ? tc->t[t].limit : 1.0;   /* 0: not set */
        if (x > limit + 1e-9)
            return error_set(err, BG_ECONFIG, "%s.shares.%s: %g is above the tenant's limit %g "
                             "(a tenant may always hold at least its guaranteed share)", at, key,
                             x, limit);
        w->share[t] = x;
        sum += x;
    }
    json_t *off = json_object_get(o, "offline_share");
    w->offline_share = off ? json_number_value(off) : 0;
    if (off && (!json_is_number(off) || w->offline_share < 0 || w->offline_share > 1))
        return error_set(err, BG_ECONFIG, "%s.offline_share: a number from 0 to 1", at);
    if (sum > 1.0 + 1e-6)   /* 0.1 + 0.2 + 0.7 is not 1 in binary */
        return error_set(err, BG_ECONFIG, "%s.shares: add up to %.9g; at most 1", at, sum);
    return 0;
}

/* The window's stretches of the week, [start, end) in seconds from Monday
 * 00:00 local; one that runs past Sunday midnight is split in two. */
static int gov_window_spans(const struct gov_window *w, int32_t (*span)[2])
{
    int n = 0;
    int32_t len = w->to > w->from ? w->to - w->from : GOV_DAY - w->from + w->to;
    for (int d = 0; d < 7; d++) {
        if (!(w->days & (1u << d)))
            continue;
        int32_t s = d * GOV_DAY + w->from, e = s + len;
        if (e <= GOV_WEEK) {
            span[n][0] = s, span[n++][1] = e;
        } else {
            span[n][0] = s, span[n++][1] = GOV_WEEK;
            span[n][0] = 0, span[n++][1] = e - GOV_WEEK;
        }
    }
    return n;
}

static int gov_check_overlap(const struct governance *g, const char *where, struct error *err)
{
    int32_t a[14][2], b[14][2];
    for (int i = 0; i < g->n; i++) {
        int na = gov_window_spans(&g->w[i], a);
        for (int j = i + 1; j < g->n; j++) {
            int nb = gov_window_spans(&g->w[j], b);
            /* The first instant of the week they share: the spans come day
             * by day, a Sunday window's part past midnight last, and the
             * first overlap found named Wednesday for a pair that met on
             * Monday 00:00 first. */
            int32_t at = -1;
            for (int x = 0; x < na; x++)
                for (int y = 0; y < nb; y++)
                    if (a[x][0] < b[y][1] && b[y][0] < a[x][1]) {
                        int32_t from = a[x][0] > b[y][0] ? a[x][0] : b[y][0];
                        if (at < 0 || from < at)
                            at = from;
                    }
            if (at >= 0) {
                char sec[8] = "";   /* seconds where the windows name them */
                if (at % 60)
                    snprintf(sec, sizeof sec, ":%02d", (int)(at % 60));
                return error_set(err, BG_ECONFIG, "%s: windows \"%s\" and \"%s\" overlap (both "
                                 "active %s %02d:%02d%s local time); a time of the week may be "
                                 "in one window at most", where, g->w[i].name, g->w[j].name,
                                 gov_days[at / GOV_DAY], at % GOV_DAY / 3600, at % 3600 / 60,
                                 sec);
            }
        }
    }
    return 0;
}

int governance_parse(const json_t *section, const struct tenants_config *tc, const char *where,
                     struct governance **out, struct error *err)
{
    *out = NULL;
    struct governance *g = calloc(1, sizeof *g);
    if (!g)
        return error_set(err, BG_ENOMEM, "out of memory");
    int rc = 0;
    if (section && !json_is_object(section)) {
        rc = error_set(err, BG_ECONFIG, "%s: must be an object", where);
        goto fail;
    }
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)section, key, v) {
        if (strcmp(key, "timezone") && strcmp(key, "windows")) {
            rc = error_set(err, BG_ECONFIG, "%s: unknown field \"%s\" (timezone, windows)", where,
                           key);
            goto fail;
        }
    }
    json_t *tzv = json_object_get(section, "timezone");
    /* "" would be the host's zone, silently: leaving it out says so. */
    if (tzv && (!json_is_string(tzv) || json_string_length(tzv) == 0)) {
        rc = error_set(err, BG_ECONFIG, "%s.timezone: an IANA zone name such as \"Europe/Paris\" "
                       "(leave it out for the host's zone)", where);
        goto fail;
    }
    snprintf(g->timezone, sizeof g->timezone, "%s", tzv ? json_string_value(tzv) : "");
    json_t *wins = json_object_get(section, "windows");
    if ((rc = tz_load(g->timezone, &g->tz, err))) {
        char why[sizeof err->msg];
        snprintf(why, sizeof why, "%s", err->msg);
        if (!g->timezone[0] && json_array_size(wins) == 0 && rc == -BG_ECONFIG) {
            /* The host's TZ cannot be read, and no window needs a zone:
             * said, not fatal (a server without windows would not start
             * for it). */
            log_warn("%s; governance falls back to /etc/localtime (no window is configured)",
                     why);
            rc = tz_load_localtime(&g->tz, err);
        } else {
            rc = error_set(err, err->code, "%s.timezone: %s%s", where, why,
                           g->timezone[0] ? "" : " (or set governance.timezone)");
        }
        if (rc)
            goto fail;
    }
    if (wins && (!json_is_array(wins) || json_array_size(wins) > GOV_WINDOWS_MAX)) {
        rc = error_set(err, BG_ECONFIG, "%s.windows: a list of at most %d windows", where,
                       GOV_WINDOWS_MAX);
        goto fail;
    }
    size_t i;
    json_t *o;
    json_array_foreach(wins, i, o) {
        if ((rc = gov_window_parse(o, (int)i, tc, where, &g->w[g->n], err)))
            goto fail;
        for (int j = 0; j < g->n; j++)
            if (strcmp(g->w[j].name, g->w[g->n].name) == 0) {
                rc = error_set(err, BG_ECONFIG, "%s.windows[%zu]: a second window named \"%s\"",
                               where, i, g->w[j].name);
                goto fail;
            }
        g->n++;
    }
    if ((rc = gov_check_overlap(g, where, err)))
        goto fail;
    *out = g;
    return 0;
fail:
    governance_free(g);
    return rc;
}

void governance_free(struct governance *g)
{
    if (!g)
        return;
    tz_free(g->tz);
    free(g);
}

int governance_active(const struct governance *g, int64_t t)
{
    if (!g || g->n == 0)
        return -1;
    int64_t local = t + tz_offset(g->tz, t);
    int64_t days = local >= 0 ? local / GOV_DAY : (local - GOV_DAY + 1) / GOV_DAY;
    int32_t tod = (int32_t)(local - days * GOV_DAY);
    int day = (int)(((days + 3) % 7 + 7) % 7);   /* 1970-01-01 was a Thursday: Monday is 0 */
    int32_t of_week = day * GOV_DAY + tod;
    int32_t span[14][2];
    for (int i = 0; i < g->n; i++) {
        int n = gov_window_spans(&g->w[i], span);
        for (int k = 0; k < n; k++)
            if (of_week >= span[k][0] && of_week < span[k][1])
                return i;
    }
    return -1;
}

int governance_window_count(const struct governance *g) { return g ? g->n : 0; }

const char *governance_window_name(const struct governance *g, int w)
{
    return g && w >= 0 && w < g->n ? g->w[w].name : NULL;
}

void governance_shares(const struct governance *g, int w, const struct tenants_config *tc,
                       double *share, double *offline_share)
{
    bool in = g && w >= 0 && w < g->n;
    double sum = 0, off = in ? g->w[w].offline_share : 0;
    for (int t = 0; t < tc->n; t++) {
        share[t] = in ? g->w[w].share[t] : tc->t[t].share;
        sum += share[t];
    }
    /* SPEC.md's own night window gives the tenants 0.3 + 0.7 and the jobs
     * 0.5: offline_share is kept, and the tenants' shares split what it
     * leaves in their proportions (0.15 and 0.35 there). */
    if (sum + off > 1.0 + 1e-9)
        for (int t = 0; t < tc->n; t++)
            share[t] *= (1.0 - off) / sum;
    *offline_share = off;
}

static void gov_json_clock(struct buf *b, const char *key, int32_t s)
{
    buf_appendf(b, ",\"%s\":\"%02d:%02d:%02d\"", key, s / 3600, s % 3600 / 60, s % 60);
}

static void gov_json_shares(struct buf *b, const struct tenants_config *tc, const double *share)
{
    buf_append(b, "{", 1);
    for (int t = 0; t < tc->n; t++) {
        buf_appendf(b, "%s", t ? "," : "");
        json_append_string(b, tc->t[t].name, strlen(tc->t[t].name));
        buf_appendf(b, ":%g", share[t]);
    }
    buf_append(b, "}", 1);
}

void governance_json(const struct governance *g, const struct tenants_config *tc, int64_t t,
                     struct buf *out)
{
    governance_json_window(g, tc, t, governance_active(g, t), out);
}

void governance_json_window(const struct governance *g, const struct tenants_config *tc,
                            int64_t t, int w, struct buf *out)
{
    double share[TENANTS_MAX], off;
    governance_shares(g, w, tc, share, &off);
    buf_append(out, "{\"timezone\":", 12);
    const char *zone = g && g->tz ? tz_name(g->tz) : "localtime";
    json_append_string(out, zone, strlen(zone));
    buf_appendf(out, ",\"utc_offset_s\":%d,\"active\":", g && g->tz ? tz_offset(g->tz, t) : 0);
    const char *name = governance_window_name(g, w);
    if (name)
        json_append_string(out, name, strlen(name));
    else
        buf_append(out, "null", 4);
    buf_append(out, ",\"shares\":", 10);
    gov_json_shares(out, tc, share);
    buf_appendf(out, ",\"offline_share\":%g,\"windows\":[", off);
    for (int i = 0; g && i < g->n; i++) {
        const struct gov_window *x = &g->w[i];
        buf_appendf(out, "%s{\"name\":", i ? "," : "");
        json_append_string(out, x->name, strlen(x->name));
        buf_append(out, ",\"days\":[", 9);
        for (int d = 0, k = 0; d < 7; d++)
            if (x->days & (1u << d))
                buf_appendf(out, "%s\"%s\"", k++ ? "," : "", gov_days[d]);
        buf_append(out, "]", 1);
        gov_json_clock(out, "from", x->from);
        gov_json_clock(out, "to", x->to);
        buf_append(out, ",\"shares\":", 10);
        gov_json_shares(out, tc, x->share);
        buf_appendf(out, ",\"offline_share\":%g}", x->offline_share);
    }
    buf_append(out, "]}", 2);
}

/* ---- the governor ---- */

struct governor {
    pthread_mutex_t mu;
    pthread_cond_t cv;                /* on the monotonic clock (governor_start) */
    pthread_t thread;
    bool stop, dirty;
    int applied;                      /* the window in force (-1: none), -2: none applied yet */
    struct governance *g;             /* under mu */
    const struct tenants_config *tc;
    governor_apply_fn apply;
    void *arg;
};

static void *governor_main(void *p)
{
    struct governor *v = p;
    pthread_mutex_lock(&v->mu);
    while (!v->stop) {
        /* Not time(): it reads the kernel's coarse clock, which can still
         * say the last second just after the wake at the next one, and the
         * switch then waited a whole second more. */
        struct timespec at;
        clock_gettime(CLOCK_REALTIME, &at);
        int64_t now = (int64_t)at.tv_sec;
        int w = governance_active(v->g, now);
        if (w != v->applied || v->dirty) {
            double share[TENANTS_MAX], off;
            governance_shares(v->g, w, v->tc, share, &off);
            const char *name = governance_window_name(v->g, w);
            char copy[64];
            snprintf(copy, sizeof copy, "%s", name ? name : "");
            v->dirty = false;
            pthread_mutex_unlock(&v->mu);
            v->apply(v->arg, share, off, copy[0] ? copy : NULL);
            pthread_mutex_lock(&v->mu);
            /* Said by GET once in force (it named the next window while
             * the shares were the last one's), unless replaced meanwhile. */
            if (!v->dirty)
                v->applied = w;
            pthread_mutex_unlock(&v->mu);
            if (copy[0] || v->tc->n > 1)   /* the default tenant alone has no shares to say */
                log_info("governance: %s%s in force",
                         copy[0] ? "window " : "the tenants' own shares", copy);
            pthread_mutex_lock(&v->mu);
            continue;
        }
        /* Wake just past the next whole second: windows are given to the
         * second, and a switch applies within milliseconds of it. Timed on
         * the monotonic clock, the wait measured from the wall clock: an
         * absolute wall-clock deadline slept through a step back of the
         * clock (an hour back, an hour of windows not applied). */
        int64_t wait = (int64_t)(1000000000 - at.tv_nsec) + 1000000;
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_sec += (time_t)((ts.tv_nsec + wait) / 1000000000);
        ts.tv_nsec = (long)((ts.tv_nsec + wait) % 1000000000);
        pthread_cond_timedwait(&v->cv, &v->mu, &ts);
    }
    pthread_mutex_unlock(&v->mu);
    return NULL;
}

struct governor *governor_start(struct governance *g, const struct tenants_config *tc,
                                governor_apply_fn apply, void *arg, struct error *err)
{
    struct governor *v = calloc(1, sizeof *v);
    if (!v) {
        error_set(err, BG_ENOMEM, "out of memory");
        return NULL;
    }
    v->g = g;
    v->tc = tc;
    v->apply = apply;
    v->arg = arg;
    v->applied = -2;
    pthread_mutex_init(&v->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&v->cv, &ca);
    pthread_condattr_destroy(&ca);
    int rc = pthread_create(&v->thread, NULL, governor_main, v);
    if (rc) {
        error_set(err, BG_EINTERNAL, "cannot start the governance thread: %s", strerror(rc));
        pthread_cond_destroy(&v->cv);
        pthread_mutex_destroy(&v->mu);
        free(v);
        return NULL;
    }
    pthread_setname_np(v->thread, "bg-governor");
    return v;
}

void governor_replace(struct governor *v, struct governance *g)
{
    pthread_mutex_lock(&v->mu);
    struct governance *old = v->g;
    v->g = g;
    v->dirty = true;
    pthread_cond_signal(&v->cv);
    pthread_mutex_unlock(&v->mu);
    governance_free(old);
}

void governor_json(struct governor *v, struct buf *out)
{
    struct timespec at;
    clock_gettime(CLOCK_REALTIME, &at);   /* not time(): its coarse clock lags a tick */
    pthread_mutex_lock(&v->mu);
    /* The window in force, as /metrics' tenant_share says it (a GET just
     * past a boundary named the next window ~4 ms before its shares were
     * in force); until the first is applied, or just after a replace,
     * the clock's. */
    int w = v->applied >= -1 && !v->dirty ? v->applied : governance_active(v->g, at.tv_sec);
    governance_json_window(v->g, v->tc, (int64_t)at.tv_sec, w, out);
    pthread_mutex_unlock(&v->mu);
}

void governor_stop(struct governor *v)
{
    if (!v)
        return;
    pthread_mutex_lock(&v->mu);
    v->stop = true;
    pthread_cond_signal(&v->cv);
    pthread_mutex_unlock(&v->mu);
    pthread_join(v->thread, NULL);
    governance_free(v->g);
    pthread_cond_destroy(&v->cv);
    pthread_mutex_destroy(&v->mu);
    free(v);
}

/* usage_query.c - see usage_query.h. */
#include "gateway/usage_query.h"

#include <ctype.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "serving/tensor_json.h"

static int usage_digits(const char *s, int n, int *out)
{
    int v = 0;
    for (int i = 0; i < n; i++) {
        if (!isdigit((unsigned char)s[i]))
            return -1;
        v = v * 10 + (s[i] - '0');
    }
    *out = v;
    return 0;
}

/* Years 1 to 9999, the ones RFC 3339 writes (and usage_format_time):
 * 12 digits of Unix seconds reached year 33658, echoed as 9999 with the
 * real month and day, a `to` before its `from`. */
static int usage_time_in_range(int64_t t, int64_t *out)
{
    if (t < USAGE_TIME_MIN || t > USAGE_TIME_MAX)
        return -1;
    *out = t;
    return 0;
}

int usage_parse_time(const char *s, int64_t *out)
{
    size_t len = strlen(s);
    if (len == 0)
        return -1;
    bool all_digits = true;
    for (size_t i = 0; i < len; i++)
        all_digits &= isdigit((unsigned char)s[i]) != 0;
    if (all_digits) {
        if (len > 12)
            return -1;
        return usage_time_in_range(strtoll(s, NULL, 10), out);
    }
    struct tm tm = {0};
    int y, mo, d, h = 0, mi = 0, sec = 0;
    if (len < 10 || usage_digits(s, 4, &y) || s[4] != '-' || usage_digits(s + 5, 2, &mo) ||
        s[7] != '-' || usage_digits(s + 8, 2, &d))
        return -1;
    const char *p = s + 10;
    int64_t offset = 0;
    if (*p) {
        if ((*p != 'T' && *p != 't' && *p != ' ') || strlen(p) < 9 ||
            usage_digits(p + 1, 2, &h) || p[3] != ':' || usage_digits(p + 4, 2, &mi) ||
            p[6] != ':' || usage_digits(p + 7, 2, &sec))
            return -1;
        p += 9;
        if (*p == '.') {
            p++;
            if (!isdigit((unsigned char)*p))
                return -1;
            while (isdigit((unsigned char)*p))
                p++;
        }
        if ((*p == 'Z' || *p == 'z') && p[1] == '\0') {
            offset = 0;
        } else if ((*p == '+' || *p == '-') && strlen(p) == 6 && p[3] == ':') {
            int oh, om;
            if (usage_digits(p + 1, 2, &oh) || usage_digits(p + 4, 2, &om) || oh > 23 || om > 59)
                return -1;
            offset = (*p == '+' ? 1 : -1) * (int64_t)(oh * 3600 + om * 60);
        } else {
            return -1;
        }
    }
    if (mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || sec > 60)
        return -1;
    tm.tm_year = y - 1900;
    tm.tm_mon = mo - 1;
    tm.tm_mday = d;
    tm.tm_hour = h;
    tm.tm_min = mi;
    /* A leap second (23:59:60Z, the only time one happens) is the next
     * second, as POSIX time has it: given to timegm as :60, it rolled
     * over into the next day and was taken for a day that did not exist. */
    tm.tm_sec = sec == 60 ? 59 : sec;
    time_t t = timegm(&tm);
    if (tm.tm_mday != d)   /* normalized: the day did not exist (Feb 30) */
        return -1;
    /* ... and only there, in UTC: 12:30:60Z was taken as 12:31:00. */
    if (sec == 60 && (((int64_t)t - offset) % 86400 + 86400) % 86400 != 86399)
        return -1;
    return usage_time_in_range((int64_t)t + (sec == 60) - offset, out);
}

int usage_parse_group_by(const char *s, int *mask)
{
    static const struct {
        const char *name;
        int bit;
    } keys[] = {
        {"tenant", STATE_USAGE_BY_TENANT},
        {"model", STATE_USAGE_BY_MODEL},
        {"class", STATE_USAGE_BY_CLASS},
        {"device", STATE_USAGE_BY_DEVICE},
    };
    *mask = 0;
    const char *p = s;
    while (*p) {
        const char *comma = strchr(p, ',');
        size_t n = comma ? (size_t)(comma - p) : strlen(p);
        int bit = 0;
        for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
            if (strlen(keys[k].name) == n && memcmp(keys[k].name, p, n) == 0)
                bit = keys[k].bit;
        if (!bit)
            return -1;
        *mask |= bit;
        if (!comma)
            break;
        p = comma + 1;
        if (!*p)
            return -1;
    }
    return 0;
}

int usage_query_check(const struct usage_query *q, const char **param, char *msg, size_t cap)
{
    if (q->step < 60) {
        *param = "step";
        snprintf(msg, cap, "step: %lld seconds; at least 60 (the ledger keeps minutes)",
                 (long long)q->step);
        return -1;
    }
    if (q->from >= q->to) {
        *param = "from";
        snprintf(msg, cap, "from: must be before to");
        return -1;
    }
    /* Periods, the last one cut short included (100,000 whole periods are
     * allowed; 100,000 and a second are not). */
    int64_t span = q->to - q->from;
    if (span / q->step + (span % q->step != 0) > USAGE_QUERY_MAX_PERIODS) {
        *param = "step";
        snprintf(msg, cap, "step: %lld seconds makes more than %d periods from `from` to `to`; "
                 "take a longer step or a shorter period", (long long)q->step,
                 USAGE_QUERY_MAX_PERIODS);
        return -1;
    }
    return 0;
}

void usage_format_time(int64_t t, char *out, size_t cap)
{
    time_t tt = (time_t)t;
    struct tm tm;
    gmtime_r(&tt, &tm);
    /* Four digits of year, as RFC 3339 has them (strftime's %Y wrote year
     * 1 as "1", which the API's own parser then refused). */
    int year = tm.tm_year + 1900;   /* the API's range is years 1 to 9999 */
    year = year < 0 ? 0 : year > 9999 ? 9999 : year;
    snprintf(out, cap, "%04u-%02u-%02uT%02u:%02u:%02uZ", (unsigned)year % 10000u,
             (unsigned)(tm.tm_mon + 1) % 100u, (unsigned)tm.tm_mday % 100u,
             (unsigned)tm.tm_hour % 100u, (unsigned)tm.tm_min % 100u, (unsigned)tm.tm_sec % 100u);
}

void usage_rows_collect(const struct state_usage_row *r, void *arg)
{
    struct usage_rows *rows = arg;
    if (rows->n == rows->cap) {
        int ncap = rows->cap ? rows->cap * 2 : 64;
        struct state_usage_row *nr = realloc(rows->r, (size_t)ncap * sizeof *nr);
        if (!nr) {
            rows->failed = 1;
            return;
        }
        rows->r = nr;
        rows->cap = ncap;
    }
    rows->r[rows->n++] = *r;
}

void usage_rows_free(struct usage_rows *rows)
{
    free(rows->r);
    rows->r = NULL;
    rows->n = rows->cap = 0;
}

static const char *const usage_key_names[4] = {"tenant", "model", "class", "device"};

static const char *usage_key_of(const struct state_usage_row *r, int k)
{
    return k == 0 ? r->tenant : k == 1 ? r->model : k == 2 ? r->cls : r->device;
}

void usage_render_json(struct buf *b, const struct usage_query *q, const struct usage_rows *rows)
{
    char t0[32], t1[32];
    usage_format_time(q->from, t0, sizeof t0);
    usage_format_time(q->to, t1, sizeof t1);
    buf_appendf(b, "{\"from\":\"%s\",\"to\":\"%s\",\"step\":%lld,\"group_by\":[", t0, t1,
                (long long)q->step);
    for (int k = 0, first = 1; k < 4; k++)
        if (q->group_by & (1 << k)) {
            buf_appendf(b, "%s\"%s\"", first ? "" : ",", usage_key_names[k]);
            first = 0;
        }
    buf_append(b, "],\"rows\":[", 10);
    for (int i = 0; i < rows->n; i++) {
        const struct state_usage_row *r = &rows->r[i];
        int64_t end = q->step < q->to - r->start ? r->start + q->step : q->to;   /* no overflow */
        usage_format_time(r->start, t0, sizeof t0);
        usage_format_time(end, t1, sizeof t1);
        buf_appendf(b, "%s{\"start\":\"%s\",\"end\":\"%s\"", i ? "," : "", t0, t1);
        for (int k = 0; k < 4; k++)
            if (q->group_by & (1 << k)) {
                buf_appendf(b, ",\"%s\":", usage_key_names[k]);
                json_append_string(b, usage_key_of(r, k), strlen(usage_key_of(r, k)));
            }
        buf_appendf(b, ",\"requests\":%lld,\"rows\":%lld,\"busy_seconds\":%.6f,"
                    "\"held_seconds\":%.6f,\"idle_seconds\":%.6f,\"cost\":%.6f,"
                    "\"energy_joules\":%.3f}", (long long)r->requests, (long long)r->rows,
                    r->busy_s, r->held_s, r->idle_s, r->cost, r->energy_j);
    }
    buf_append(b, "]}", 2);
}

/* A CSV field: quoted when it holds a comma, a quote or a line break. */
static void usage_csv_field(struct buf *b, const char *s)
{
    if (!strpbrk(s, ",\"\r\n")) {
        buf_append(b, s, strlen(s));
        return;
    }
    buf_append(b, "\"", 1);
    for (const char *p = s; *p; p++)
        buf_append(b, *p == '"' ? "\"\"" : p, *p == '"' ? 2 : 1);
    buf_append(b, "\"", 1);
}

void usage_render_csv(struct buf *b, const struct usage_query *q, const struct usage_rows *rows)
{
    buf_appendf(b, "start,end,tenant,model,class,device,requests,rows,busy_seconds,"
                   "held_seconds,idle_seconds,cost,energy_joules\r\n");
    for (int i = 0; i < rows->n; i++) {
        const struct state_usage_row *r = &rows->r[i];
        char t0[32], t1[32];
        int64_t end = q->step < q->to - r->start ? r->start + q->step : q->to;   /* no overflow */
        usage_format_time(r->start, t0, sizeof t0);
        usage_format_time(end, t1, sizeof t1);
        buf_appendf(b, "%s,%s", t0, t1);
        for (int k = 0; k < 4; k++) {
            buf_append(b, ",", 1);
            usage_csv_field(b, usage_key_of(r, k));
        }
        buf_appendf(b, ",%lld,%lld,%.6f,%.6f,%.6f,%.6f,%.3f\r\n", (long long)r->requests,
                    (long long)r->rows, r->busy_s, r->held_s, r->idle_s, r->cost, r->energy_j);
    }
}

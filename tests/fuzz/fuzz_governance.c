/* fuzz_governance.c - an admin's PUT /v2/governance body (or a config's
 * `governance` section) through serving/governance.c's governance_parse,
 * the time zone it names included (common/tz.c: the name's checks, the
 * zone file read from the system's tz database), then GET's answer for it.
 *
 * The input is the body, parsed as gateway/api_body.c parses it (duplicate
 * keys refused). Tenants: default (limit 0.4), search, research. Beyond "no
 * crash, no leak": a refusal has a code and a message naming "governance";
 * a governance that parses has at most GOV_WINDOWS_MAX windows, each named
 * in letters, digits, '-', '_' and '.', no two alike; the active window at
 * any instant (a week of instants, 1969, 2038, 2100 and 9999) is -1 or
 * one of them; the shares in force are each 0 to 1, as is offline_share,
 * and add up to at most 1 with it; GET's answer is JSON, lists the windows
 * in order, and no two of the windows it lists share an instant of the
 * week (worked out here again from their days, from and to). */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "common/buf.h"
#include "serving/governance.h"

#define DAY 86400
#define WEEK (7 * DAY)

static struct tenants_config tc;

int LLVMFuzzerInitialize(int *argc, char ***argv);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    /* "" is the host's zone: the same on every machine. */
    setenv("TZ", "UTC", 1);
    tc.n = 3;
    strcpy(tc.t[0].name, "default");
    strcpy(tc.t[1].name, "search");
    strcpy(tc.t[2].name, "research");
    tc.t[1].share = 0.5;
    tc.t[2].share = 0.25;
    tc.t[0].limit = 0.4;
    return 0;
}

static int32_t clock_of(const char *s)
{
    int h, m, sec;
    if (!s || sscanf(s, "%2d:%2d:%2d", &h, &m, &sec) != 3 || strlen(s) != 8)
        abort();   /* GET writes HH:MM:SS */
    return h * 3600 + m * 60 + sec;
}

/* The window's stretches of the week, [start, end) from Monday 00:00. */
static int spans(const json_t *w, int32_t (*sp)[2])
{
    static const char *const days[7] = {"mon", "tue", "wed", "thu", "fri", "sat", "sun"};
    int32_t from = clock_of(json_string_value(json_object_get(w, "from")));
    int32_t to = clock_of(json_string_value(json_object_get(w, "to")));
    int32_t len = to > from ? to - from : DAY - from + to;
    int n = 0;
    size_t i;
    json_t *d;
    json_array_foreach(json_object_get(w, "days"), i, d) {
        int k = -1;
        for (int j = 0; j < 7; j++)
            if (strcmp(json_string_value(d), days[j]) == 0)
                k = j;
        if (k < 0)
            abort();
        int32_t s = k * DAY + from, e = s + len;
        sp[n][0] = s, sp[n++][1] = e < WEEK ? e : WEEK;
        if (e > WEEK)
            sp[n][0] = 0, sp[n++][1] = e - WEEK;
    }
    if (n == 0)
        abort();   /* GET lists every day of a window of every day */
    return n;
}

/* A "shares" object of GET's: every tenant, each 0 to 1. */
static void check_shares(const json_t *sh)
{
    const char *k;
    json_t *v;
    if (json_object_size(sh) != (size_t)tc.n)
        abort();
    json_object_foreach((json_t *)sh, k, v) {
        double x = json_number_value(v);
        if (!json_is_number(v) || x < 0 || x > 1)
            abort();
    }
}

static void check(const struct governance *g)
{
    int n = governance_window_count(g);
    if (n < 0 || n > GOV_WINDOWS_MAX)
        abort();
    for (int i = 0; i < n; i++) {
        const char *name = governance_window_name(g, i);
        if (!name || !name[0] || strspn(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                              "0123456789-_.") != strlen(name))
            abort();
        for (int j = 0; j < i; j++)
            if (strcmp(name, governance_window_name(g, j)) == 0)
                abort();
    }
    if (governance_window_name(g, n) || governance_window_name(g, -1))
        abort();
    /* A week of instants from a Monday (2024-01-01), 37 minutes apart, and the ends. */
    for (int64_t t = 1704067200; t < 1704067200 + WEEK + DAY; t += 37 * 60) {
        int w = governance_active(g, t);
        if (w < -1 || w >= n)
            abort();
    }
    /* Instants the governor's clock can give. Not int64's ends: tz.c's
     * tz_year_of walks year by year from an estimate 0.2% short, 3e8 steps
     * (two minutes) at INT64_MAX / 2, and t + offset would overflow there. */
    const int64_t ends[] = {-1, 0, INT32_MAX, 4102444800 /* 2100 */, 253402300799 /* 9999 */};
    for (size_t i = 0; i < sizeof ends / sizeof ends[0]; i++) {
        int w = governance_active(g, ends[i]);
        if (w < -1 || w >= n)
            abort();
    }
    for (int w = -1; w < n; w++) {
        double share[TENANTS_MAX], off, sum = 0;
        governance_shares(g, w, &tc, share, &off);
        if (!(off >= 0 && off <= 1))
            abort();
        for (int t = 0; t < tc.n; t++) {
            if (!(share[t] >= 0 && share[t] <= 1))
                abort();
            sum += share[t];
        }
        if (sum + off > 1.0 + 1e-6)
            abort();
    }

    struct buf b = BUF_INIT;
    governance_json(g, &tc, 1704067200, &b);
    json_error_t je;
    json_t *root = json_loadb(b.data, b.len, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        abort();
    json_t *wins = json_object_get(root, "windows");
    if (json_array_size(wins) != (size_t)n)
        abort();
    check_shares(json_object_get(root, "shares"));
    int32_t a[14][2], c[14][2];
    for (int i = 0; i < n; i++) {
        json_t *wi = json_array_get(wins, (size_t)i);
        if (strcmp(json_string_value(json_object_get(wi, "name")), governance_window_name(g, i)))
            abort();
        check_shares(json_object_get(wi, "shares"));
        int na = spans(wi, a);
        for (int j = 0; j < i; j++) {
            int nc = spans(json_array_get(wins, (size_t)j), c);
            for (int x = 0; x < na; x++)
                for (int y = 0; y < nc; y++)
                    if (a[x][0] < c[y][1] && c[y][0] < a[x][1])
                        abort();   /* two windows at one instant */
        }
    }
    json_decref(root);
    buf_free(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_t *root = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES, NULL);
    if (!json_is_object(root)) {
        json_decref(root);
        return 0;
    }
    struct governance *g = NULL;
    struct error err = {0};
    int rc = governance_parse(root, &tc, "governance", &g, &err);
    json_decref(root);
    if (rc != 0) {
        if (g || err.code == 0 || rc != -err.code || !strstr(err.msg, "governance"))
            abort();
        return 0;
    }
    if (!g)
        abort();
    check(g);
    governance_free(g);
    return 0;
}

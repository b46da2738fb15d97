/* ledger_split.c - the usage ledger's allocation rule (ledger.h; the rule
 * in words, with an example: docs/USAGE.md "Who pays for what"). */
#include "serving/ledger.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int ledger_split(const struct ledger_inst *in, int n, int ntenants, double wall_s,
                 double price_per_hour, double energy_j, struct ledger_piece *out, int cap)
{
    if (ntenants < 1)
        ntenants = 1;
    if (ntenants > WORK_TENANTS_MAX)
        ntenants = WORK_TENANTS_MAX;
    /* The device was held while any instance was resident: the longest one
     * (they overlap, on one device, except across a load or an unload). */
    double longest = 0, sum_held = 0;
    for (int i = 0; i < n; i++) {
        double b = in[i].busy_s > 0 ? in[i].busy_s : 0;
        double h = in[i].held_s > b ? in[i].held_s : b;
        longest = h > longest ? h : longest;
        sum_held += h;
    }
    if (wall_s > 0 && longest > wall_s)
        longest = wall_s;
    double rate = sum_held > 0 ? price_per_hour / 3600.0 * longest / sum_held : 0;
    double erate = sum_held > 0 ? energy_j / sum_held : 0;
    int np = 0;
    struct ledger_piece acc[WORK_TENANTS_MAX * 2];
    for (int i = 0; i < n; i++) {
        double b = in[i].busy_s > 0 ? in[i].busy_s : 0;
        double idle = (in[i].held_s > b ? in[i].held_s : b) - b;
        memset(acc, 0, sizeof acc[0] * (size_t)ntenants * 2);
        double used = 0, wsum = 0;
        for (int t = 0; in[i].use && t < ntenants; t++)
            used += in[i].use[t].busy_s[0] + in[i].use[t].busy_s[1];
        for (int t = 0; t < ntenants; t++)
            wsum += in[i].idle_w && in[i].idle_w[t] > 0 ? in[i].idle_w[t] : 0;
        for (int t = 0; t < ntenants; t++) {
            double w = wsum > 0 ? (in[i].idle_w[t] > 0 ? in[i].idle_w[t] : 0) / wsum
                                : (t == 0 ? 1 : 0);
            struct ledger_piece *on = &acc[t * 2];
            on->idle_s = idle * w;
            if (used <= 0)   /* busy nobody's batch recorded: as idle goes */
                on->busy_s = b * w;
            for (int c = 0; in[i].use && c < 2; c++) {
                const struct modelstats_tenant_use *u = &in[i].use[t];
                struct ledger_piece *p = &acc[t * 2 + c];
                p->requests = (int64_t)u->requests[c];
                p->rows = (int64_t)u->rows[c];
                if (used > 0)
                    p->busy_s = b * u->busy_s[c] / used;
            }
        }
        for (int k = 0; k < ntenants * 2; k++) {
            struct ledger_piece *p = &acc[k];
            if (!p->requests && !p->rows && p->busy_s <= 0 && p->idle_s <= 0)
                continue;
            if (np == cap)
                return np;
            p->inst = i;
            p->tenant = k / 2;
            p->cls = k % 2;
            double held = p->busy_s + p->idle_s;
            p->cost = held * rate;
            p->energy_j = held * erate;
            out[np++] = *p;
        }
    }
    return np;
}

int ledger_spread(double t0, double t1, const struct ledger_piece *p, int64_t *minutes,
                  struct ledger_piece *out)
{
    int64_t mid = (int64_t)floor((t0 + t1) / 2 / 60) * 60;
    double span = t1 - t0;
    int64_t first = (int64_t)floor(t0 / 60) * 60;
    /* One minute, no span, or a stall past the room: the middle's minute. */
    if (!(span > 0) || first == (int64_t)floor(t1 / 60) * 60 ||
        (double)first + 60.0 * LEDGER_SPREAD_MAX < t1) {
        minutes[0] = mid;
        out[0] = *p;
        return 1;
    }
    int n = 0;
    for (int64_t m = first; (double)m < t1; m += 60, n++) {
        double a = (double)m > t0 ? (double)m : t0;
        double b = (double)(m + 60) < t1 ? (double)(m + 60) : t1;
        double f = (b - a) / span;
        out[n] = *p;
        out[n].busy_s *= f;
        out[n].idle_s *= f;
        out[n].cost *= f;
        out[n].energy_j *= f;
        out[n].requests = m == mid ? p->requests : 0;
        out[n].rows = m == mid ? p->rows : 0;
        minutes[n] = m;
    }
    return n;
}

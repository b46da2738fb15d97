/* governance.h - time windows (SPEC.md "Time windows", docs/TENANTS.md):
 * shares of device time that change with the local time of day and the day
 * of the week ("inference by day, batch by night").
 *
 * A window names its days (none: every day), its local `from` and `to`
 * (a window whose `to` is not after its `from` runs past midnight into the
 * next day and belongs to the day it starts), the tenants' shares while it
 * is active (a tenant it does not name has share 0: it borrows only) and
 * `offline_share`, the part of each device job lines are guaranteed. Outside
 * every window the tenants' own shares apply. Overlapping windows are a
 * configuration error naming both. The governor thread applies the active
 * window within a second of a switch. */
#ifndef BG_GOVERNANCE_H
#define BG_GOVERNANCE_H

#include <stdint.h>

#include <jansson.h>

#include "common/buf.h"
#include "common/error.h"
#include "serving/tenant.h"

#define GOV_WINDOWS_MAX 32

struct governance;

/* Parses a `governance` section (NULL: none, every tenant on its own
 * share); tenant names must be in tc. `where` prefixes messages
 * ("governance", or the file it came from). */
int governance_parse(const json_t *section, const struct tenants_config *tc, const char *where,
                     struct governance **out, struct error *err);
void governance_free(struct governance *g);
/* The window active at the UTC instant t (Unix seconds), or -1. */
int governance_active(const struct governance *g, int64_t t);
/* How many windows g has (0 for NULL). */
int governance_window_count(const struct governance *g);
const char *governance_window_name(const struct governance *g, int w);
/* The shares in force with window w (-1: the tenants' own) into share[tc->n]. */
void governance_shares(const struct governance *g, int w, const struct tenants_config *tc,
                       double *share, double *offline_share);
/* GET /v2/governance's body: the timezone, the active window (or null), the
 * shares in force and the windows. */
void governance_json(const struct governance *g, const struct tenants_config *tc, int64_t t,
                     struct buf *out);
/* The same with window w (-1: none) as the active one, at t. */
void governance_json_window(const struct governance *g, const struct tenants_config *tc,
                            int64_t t, int w, struct buf *out);

/* ---- the governor: applies the active window ---- */

struct governor;
/* apply(arg, share, offline_share) is called from the governor's thread at
 * start and at each switch (and at once after governor_replace). */
typedef void (*governor_apply_fn)(void *arg, const double *share, double offline_share,
                                  const char *window);
struct governor *governor_start(struct governance *g, const struct tenants_config *tc,
                                governor_apply_fn apply, void *arg, struct error *err);
/* Replaces the governance (the governor owns g from here); applied within a
 * second. */
void governor_replace(struct governor *v, struct governance *g);
/* The body of GET /v2/governance, under the governor's lock. */
void governor_json(struct governor *v, struct buf *out);
void governor_stop(struct governor *v);

#endif

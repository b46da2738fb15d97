/* group.h - length grouping: a batch cut from a queue that holds more
 * tokens than the batch can take may trade some of its members for queued
 * requests of closer length.
 *
 * Why: a padded layout (a GPU kernel, a model server behind the upstream
 * backend) computes every row to the batch's longest, so a batch of
 * lengths 5 to 200 is mostly padding, and attention's len^2 makes the
 * padding dearer still. A packed kernel (batchgate's CPU encoder) computes
 * no padding and gains nothing, while the requests passed over wait a
 * batch longer: so batching.group_by_length is off unless set
 * (docs/BATCHING.md, Token budgets, has both measured).
 *
 * The rule, given the policy's selection (policy.h) filled up to a budget
 * of B tokens that finishes by F = now + exec(B):
 *   - its first member in service order, the anchor, always goes (the
 *     oldest request, or the most urgent, or an aged one: whoever the
 *     service order puts first), and so does every member that could not
 *     wait for this batch and a full one after it (deadline before F +
 *     exec(max_batch_tokens));
 *   - the rest is filled, in service order, from the requests of the
 *     anchor's priority whose deadline allows F and whose longest row is
 *     within d tokens of the anchor's;
 *   - of the bands d (the distinct distances in view, 32 of them at most,
 *     spread evenly) and the policy's own selection, the one a padded
 *     device would spend least time per token on is sent: (a + b*rows*maxlen + c*rows*maxlen^2) / tokens,
 *     with a, b and c the latency model's (a wider band spreads the setup
 *     over more tokens and pads more);
 *   - nothing is grouped when the selection mixes priorities, or when a
 *     request of a better priority than the anchor's waits (the anchor is
 *     then an aged request: the requests of its priority must not pass
 *     the better ones).
 * So no member needs more than B tokens' execution (every deadline the
 * selection met still holds), no request is left behind that could not
 * afford it, priorities are never crossed, and no request starves: the
 * anchor is served at every cut, and the requests before a request in
 * service order only become fewer (a long request becomes the anchor
 * after at most as many cuts as requests were before it). */
#ifndef BG_GROUP_H
#define BG_GROUP_H

#include <stdbool.h>
#include <stdint.h>

#include "batcher/latmodel.h"
#include "batcher/policy.h"

/* Refines d (take > 0, its pick in q's order or a prefix) in place; t and
 * t->req are not NULL; lat may be NULL (then padding alone is weighed);
 * `deadlines`: the policy plans to them (lat is then not NULL). Uses the
 * half of d->scratch that d->pick does not, and `work`, room for n ints. */
void group_by_length(const struct policy_config *c, const struct policy_tokens *t,
                     const struct latmodel *lat, bool deadlines, const struct policy_request *q,
                     int n, int64_t now_ns, struct policy_decision *d, int *work);

#endif

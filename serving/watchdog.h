/* watchdog.h - the batch watchdog (batching.batch_timeout_ms).
 *
 * A backend call that never returns (a wedged driver, a deadlock in a
 * library) must not hold its requests forever. Each worker tells the
 * watchdog which batch its instance runs; one thread per model answers the
 * requests of a batch running past the limit with 504 and marks it
 * abandoned. The instance is out meanwhile (its worker is stuck in the
 * call); when the call returns, watchdog_end says so and the worker drops
 * the result. Whoever comes first under the watchdog's lock, the worker
 * ending or the watchdog abandoning, owns the batch's requests. */
#ifndef BG_WATCHDOG_H
#define BG_WATCHDOG_H

#include <stdbool.h>
#include <stdint.h>

#include "batcher/work.h"
#include "common/error.h"

struct watchdog;

/* Called on the watchdog's thread once it gave up on instance i's batch,
 * held_ns after it began: the worker's device slot goes back there (a hung
 * call of one model held the slot other models' batches waited for). */
typedef void (*watchdog_abandon_fn)(void *arg, int instance, int64_t held_ns);

/* Starts the thread; `model` names it in messages; on_abandon may be NULL. */
struct watchdog *watchdog_new(const char *model, int instances, int64_t limit_ms,
                              watchdog_abandon_fn on_abandon, void *arg, struct error *err);
/* Instance `i` starts running the items of a batch. */
void watchdog_begin(struct watchdog *w, int i, struct infer_item *items);
/* Its call returned: true when the watchdog already answered the items. */
bool watchdog_end(struct watchdog *w, int i);
/* Whether instance i is inside a call the watchdog gave up on. */
bool watchdog_abandoned(struct watchdog *w, int i);
/* Stops the thread. `keep`: a worker is stranded in an abandoned call and
 * may still call watchdog_end, so the structure stays (leaked on purpose). */
void watchdog_free(struct watchdog *w, bool keep);

#endif

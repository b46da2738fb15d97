/* serving.h - the models this process serves: the repository scanned at
 * start, each model loaded on its backend, paired with its batcher and
 * instance workers. Lookups are lock-free once built: the table does not
 * change after serving_open. */
#ifndef BG_SERVING_H
#define BG_SERVING_H

#include <stdbool.h>
#include <stddef.h>

#include "backends/backend.h"
#include "batcher/batcher.h"
#include "common/error.h"
#include "gateway/modelstats.h"

enum served_state { SERVED_LOADING, SERVED_READY, SERVED_FAILED };

struct served_model {
    struct model model;
    struct batcher *batcher;
    _Atomic int state;               /* enum served_state; model.reason is set before FAILED */
    struct modelstats *stats;        /* NULL until loaded */
};

struct serving;

/* Scans `dir` (one folder per model with a config.json). A folder whose
 * config is invalid becomes a FAILED model with the reason; only an
 * unreadable repository is an error. `required`: a missing directory is an
 * error (it was asked for explicitly) rather than an empty repository. */
int serving_open(const char *dir, bool required, int io_threads, struct serving **out,
                 struct error *err);
/* Loads every model (cold start timed and logged) and starts its workers. */
void serving_load_all(struct serving *s);
int serving_count(const struct serving *s);
struct served_model *serving_at(struct serving *s, int i);
struct served_model *serving_find(struct serving *s, const char *name, size_t len);
/* Every model that was found loaded. */
bool serving_all_ready(struct serving *s);
/* Stops the batchers (queued requests fail with 503) and joins the workers. */
void serving_stop(struct serving *s);
void serving_free(struct serving *s);

#endif

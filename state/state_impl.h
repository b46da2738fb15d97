/* state_impl.h - the database's connections, for the files of state/ (the
 * jobs in state.c, the usage ledger in usage.c). */
#ifndef BG_STATE_IMPL_H
#define BG_STATE_IMPL_H

#include <pthread.h>

#include <sqlite3.h>

#include "state/state.h"

/* The usage ledger writer's connection. */
sqlite3 *state_db_usage(struct state *st);
/* The readers' connection and the mutex to hold while using it. */
sqlite3 *state_db_reader(struct state *st, pthread_mutex_t **mu);

#endif

/* httpc_impl.h - what the connection side of httpc (httpc.c) asks of the
 * target side (httpc_target.c). Nothing outside common/httpc*.c includes it. */
#ifndef BG_HTTPC_IMPL_H
#define BG_HTTPC_IMPL_H

#include <stdbool.h>
#include <sys/socket.h>

#include "common/httpc.h"

struct httpc_target;

/* A call went out to t (`behind`: on a connection shared with calls ahead);
 * its busy time runs from the first call in flight. */
/* A pool's reference to its target, dropped by httpc_pool_free: the last
 * one frees it (the owner's goes with httpc_target_free). */
void httpc_target_unref(struct httpc_target *t);
void httpc_target_begin(struct httpc_target *t, bool behind);
/* A call to t ended, however it ended. */
void httpc_target_end(struct httpc_target *t);
/* A call to t was answered whole ns after it began, with `status`: its
 * time to an answer, which httpc_pick weighs each target's load by, when
 * the status is below 400; a 429 or 5xx is no measure of it (nor of the
 * others, until it answers again), another 4xx is the request's. */
void httpc_target_answered(struct httpc_target *t, int64_t ns, int status);
/* Where to connect. */
const struct sockaddr_storage *httpc_target_addr(const struct httpc_target *t, socklen_t *len);

#endif

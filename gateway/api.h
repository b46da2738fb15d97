/* api.h - the HTTP API's route handlers, registered into the router by main. */
#ifndef BG_API_H
#define BG_API_H

#include <stdatomic.h>
#include <stdbool.h>

#include "error.h"
#include "router.h"

struct serving;

/* Process state the health routes report. Owned by main. */
struct api_state {
    _Atomic bool ready;       /* startup finished (models loaded, from the inference issue on) */
    _Atomic bool draining;    /* SIGTERM received: not ready any more */
    struct serving *serving;  /* the models; NULL when none */
};

/* GET /v2/health/live, /v2/health/ready, /v2 */
int api_health_register(struct router *r, struct api_state *st, struct error *err);
/* GET/POST /v2/models/{model}[/versions/{v}][/ready|/config|/infer],
 * POST /v1/models/{model}:predict */
int api_models_register(struct router *r, struct api_state *st, struct error *err);
/* GET /debug/delay?ms=N[&id=X], POST /debug/echo: test hooks, off unless
 * the config enables debug_endpoints. */
int api_debug_register(struct router *r, struct error *err);

#endif

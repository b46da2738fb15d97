/* openai.c - the openai backend: an LLM pool's servers (OpenAI-compatible:
 * vLLM, SGLang, TGI, llama.cpp's llama-server, Ollama), which batch inside
 * themselves. It runs no batches: what it holds is the servers as httpc
 * targets (their health and accounting, shared by every thread that calls
 * them), one device each. Which endpoint a call goes to, the scraping of
 * their metrics and the calls themselves are the serving layer's
 * (serving/llmpool.h) and the gateway's (gateway/api_llm.c). */
#include "backends/backend_impl.h"

#include <stdio.h>
#include <stdlib.h>

#include "common/clock.h"
#include "common/httpc.h"

struct oa_model {
    struct httpc_target *targets[MODEL_MAX_ENDPOINTS];
    int n;
};

static void openai_model_unload(struct model *m)
{
    struct oa_model *om = m->shared;
    for (int i = 0; om && i < om->n; i++)
        httpc_target_free(om->targets[i]);
    free(om);
    m->shared = NULL;
}

static int openai_model_load(struct model *m, struct cold_start *cs, struct error *err)
{
    const struct model_pool *p = &m->cfg.pool;
    int64_t t0 = now_ns();
    struct oa_model *om = calloc(1, sizeof *om);
    if (!om)
        return error_set(err, BG_ENOMEM, "%s: out of memory", m->cfg.name);
    m->shared = om;
    m->shared_bytes = 0;
    char who[300];
    snprintf(who, sizeof who, "model %s", m->cfg.name);
    for (int i = 0; i < p->nendpoints; i++) {
        struct error e2 = {0};
        char name[32];
        snprintf(name, sizeof name, "endpoints[%d]", i);
        om->targets[i] = httpc_target_new(p->hosts[i], p->ports[i], who, name, &e2);
        om->targets[i] = backend_server_continue(m, i, om->targets[i]);
        if (!om->targets[i]) {
            error_set(err, e2.code, "%s: endpoints[%d]: %s", m->cfg.config_path, i, e2.msg);
            openai_model_unload(m);
            return -err->code;
        }
        om->n++;
    }
    cs->read_s = 0;
    cs->prepare_s = (double)(now_ns() - t0) / 1e9;
    return 0;
}

static int openai_instance_load(struct instance *in, struct error *err)
{
    (void)err;
    in->state = NULL;
    in->memory_bytes = 0;
    return 0;
}

static void openai_instance_unload(struct instance *in) { (void)in; }

/* One device per endpoint, by its index in `endpoints`. */
static void openai_devices(const struct model *m, model_device_fn fn, void *arg)
{
    const struct oa_model *om = m->shared;
    struct model_device d = {.kind = BACKEND_DEVICE_UPSTREAM, .instance = -1};
    for (int i = 0; om && i < om->n; i++) {
        snprintf(d.name, sizeof d.name, "endpoint%d", i);
        d.target = om->targets[i];
        fn(&d, arg);
    }
}

static int openai_servers(const struct model *m, struct httpc_target *const **out)
{
    struct oa_model *om = m->shared;
    *out = om ? om->targets : NULL;
    return om ? om->n : 0;
}

const struct backend_i backend_openai = {
    .name = "openai",
    .kind = BACKEND_POOL,
    .device_kind = BACKEND_DEVICE_UPSTREAM,
    .model_load = openai_model_load,
    .model_unload = openai_model_unload,
    .instance_load = openai_instance_load,
    .instance_unload = openai_instance_unload,
    .devices = openai_devices,
    .servers = openai_servers,
};

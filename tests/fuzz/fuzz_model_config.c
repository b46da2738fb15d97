/* fuzz_model_config.c - a model's config.json through model_config_parse.
 *
 * The input is the file. It is parsed twice: as a model whose folder name is
 * unknown (name required) and as models/digits/ (name defaults to "digits"
 * and must match it). Beyond "no crash, no leak": a config that parses keeps
 * the promises model.h makes to the rest of the gateway (terminated names,
 * shapes and counts within their arrays, row sizes that are the product of
 * the shape). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backends/model.h"

#define TERMINATED(a) (memchr((a), '\0', sizeof(a)) != NULL)

static void check_tensor(const struct model_tensor *t)
{
    if (!TERMINATED(t->name) || !t->name[0] || strcmp(t->datatype, "FP32") != 0)
        abort();
    if (t->ndims < 1 || t->ndims > MODEL_MAX_DIMS)
        abort();
    int64_t n = 1;
    for (int i = 0; i < t->ndims; i++) {
        if (t->shape[i] < 1)
            abort();
        n *= t->shape[i];
    }
    if (n != t->row_elems || n > (1 << 24))
        abort();
}

static void check(const struct model_config *c, const char *dir_name)
{
    if (!TERMINATED(c->name) || !c->name[0] || (dir_name && strcmp(c->name, dir_name) != 0))
        abort();
    if (c->backend < MODEL_BACKEND_AUTO || c->backend > MODEL_BACKEND_UPSTREAM)
        abort();
    check_tensor(&c->input);
    check_tensor(&c->output);
    const struct model_batching *b = &c->batching;
    if (b->max_batch_size < 1 || b->npreferred < 0 || b->npreferred > MODEL_MAX_PREFERRED ||
        b->max_queue_size < 1 || b->default_priority < 1 || !TERMINATED(b->policy))
        abort();
    for (int i = 0; i < b->npreferred; i++)
        if (b->preferred[i] < 1 || b->preferred[i] > b->max_batch_size)
            abort();
    if (c->nlayers < 0 || c->nlayers > MODEL_MAX_LAYERS || c->instance_count < 1 ||
        c->ndevices < 0 || c->ndevices > MODEL_MAX_DEVICES)
        abort();
    bool layered = c->backend != MODEL_BACKEND_SYNTHETIC && c->backend != MODEL_BACKEND_UPSTREAM;
    if (layered != (c->nlayers > 0))
        abort();
    for (int i = 0; i < c->nlayers; i++) {
        const struct model_layer *l = &c->layers[i];
        if (!TERMINATED(l->weight) || !TERMINATED(l->bias))
            abort();
        if (l->type == MODEL_LAYER_DENSE && !l->weight[0])
            abort();
    }
    if (c->backend == MODEL_BACKEND_UPSTREAM) {
        const struct model_upstream *u = &c->upstream;
        if (u->nurls < 1 || u->nurls > MODEL_MAX_UPSTREAMS || !TERMINATED(u->model) ||
            !u->model[0] || u->max_inflight < 1 || u->timeout_ms < 1)
            abort();
        for (int i = 0; i < u->nurls; i++)
            if (!TERMINATED(u->hosts[i]) || !u->hosts[i][0] || u->ports[i] < 1 ||
                u->ports[i] > 65535)
                abort();
    }
}

static void parse(const uint8_t *data, size_t size, const char *dir_name)
{
    struct model_config *c = malloc(sizeof *c);   /* 10 KiB: off the stack */
    struct error err = {0};
    if (!c)
        abort();
    int rc = model_config_parse((const char *)data, size, "models/fuzz/config.json", dir_name, c,
                                &err);
    if (rc == 0)
        check(c, dir_name);
    else if (err.code == 0 || !strstr(err.msg, "models/fuzz/config.json"))
        abort();   /* a refusal names the file */
    free(c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    parse(data, size, NULL);
    parse(data, size, "digits");
    return 0;
}

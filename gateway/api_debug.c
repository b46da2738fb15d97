/* api_debug.c - test hooks behind the debug_endpoints config switch.
 *
 * /debug/delay answers after a timer, exercising the deferred-answer path
 * that model inference takes (pipelined answers produced out of order, drain
 * with requests in flight, clients that leave mid-request). /debug/echo
 * returns the decoded body (chunked uploads, 100-continue, body limits).
 * /debug/fault makes a model's next batches fail, hang or slow down. */
#include "gateway/api.h"

#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <jansson.h>

#include "backends/backend.h"
#include "serving/jobs.h"
#include "serving/serving.h"
#include "state/state.h"

struct delayed {
    struct http_request *req;
    struct event *ev;
    char body[256];
};

static void debug_delayed_finish(struct delayed *d)
{
    event_free(d->ev);
    http_respond(d->req, 200, "application/json", d->body, strlen(d->body), NULL);
    free(d);
}

static void debug_on_delay(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    debug_delayed_finish(arg);
}

static void debug_on_delay_abort(struct http_request *req, void *arg)
{
    (void)req;
    struct delayed *d = arg;
    event_del(d->ev);
    debug_delayed_finish(d);
}

static void debug_delay(struct http_request *req, const struct route_match *m, void *ctx)
{
    (void)m;
    (void)ctx;
    char ms_s[16] = "0", id[64] = "";
    if (http_request_query_param(req, "ms", ms_s, sizeof ms_s) < 0)
        snprintf(ms_s, sizeof ms_s, "x");   /* refused below */
    if (http_request_query_param(req, "id", id, sizeof id) < 0)
        id[0] = '\0';
    char *end;
    long ms = strtol(ms_s, &end, 10);
    if (*end || ms < 0 || ms > 600000) {
        http_respond_error(req, 400, NULL, "query parameter ms: must be 0..600000");
        return;
    }
    for (char *p = id; *p; p++)   /* keep the echo valid JSON */
        if (*p == '"' || *p == '\\' || (unsigned char)*p < 0x20)
            *p = '_';
    struct delayed *d = calloc(1, sizeof *d);
    if (!d || !(d->ev = evtimer_new(http_request_event_base(req), debug_on_delay, d))) {
        free(d);
        http_respond_error(req, 500, NULL, "out of memory");
        return;
    }
    d->req = req;
    snprintf(d->body, sizeof d->body, "{\"delayed_ms\":%ld,\"id\":\"%s\"}", ms, id);
    http_request_on_abort(req, debug_on_delay_abort, d);
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    evtimer_add(d->ev, &tv);
}

static void debug_echo(struct http_request *req, const struct route_match *m, void *ctx)
{
    (void)m;
    (void)ctx;
    size_t len, ctlen;
    const char *body = http_request_body(req, &len);
    const char *ct = http_request_header(req, "Content-Type", &ctlen);
    char ctype[128] = "application/octet-stream";
    if (ct && ctlen > 0 && ctlen < sizeof ctype && !memchr(ct, '\r', ctlen)) {
        memcpy(ctype, ct, ctlen);
        ctype[ctlen] = '\0';
    }
    http_respond(req, 200, ctype, body, len, NULL);
}

/* POST /debug/fault {"model": "m", "mode": "fail"|"hang"|"slow"|"none",
 * "count": 1, "ms": 0}: the model's next `count` batches fail, hang or slow
 * down (backend.h: model_fault_set). */
static void debug_fault(struct http_request *req, const struct route_match *m, void *ctx)
{
    (void)m;
    struct api_state *st = ctx;
    /* Read as every operator body is: a body of millions of values was
     * parsed whole before its fields were looked at (the re-test). */
    json_t *o = api_body_object(req, false, "{\"model\": ..., \"mode\": ...}");
    if (!o)
        return;
    const char *name = json_string_value(json_object_get(o, "model"));
    const char *mode = json_string_value(json_object_get(o, "mode"));
    json_int_t count = json_integer_value(json_object_get(o, "count"));
    json_int_t ms = json_integer_value(json_object_get(o, "ms"));
    static const char *const modes[] = {"none", "fail", "hang", "slow"};
    int mi = -1;
    for (int i = 0; mode && i < 4; i++)
        if (strcmp(mode, modes[i]) == 0)
            mi = i;
    struct served_model *sm = name && st->serving ? serving_acquire(st->serving, name, strlen(name))
                                                  : NULL;
    if (!sm || mi < 0 || count < 0 || ms < 0 || ms > 600000) {
        http_respond_error(req, 400, NULL, "expected {\"model\": a served model, \"mode\": "
                                           "none|fail|hang|slow, \"count\": N, \"ms\": 0..600000}");
    } else if ((mi == MODEL_FAULT_HANG || mi == MODEL_FAULT_SLOW) && ms == 0) {
        /* A hang of 0 ms is no fault at all: the caller forgot how long. */
        http_respond_error(req, 400, NULL, "ms: how long a %s batch takes, 1..600000", mode);
    } else {
        model_fault_set(&sm->model, (enum model_fault)mi, json_object_get(o, "count") ? (int)count : 1,
                        (int)ms);
        http_respond(req, 200, "application/json", "{\"ok\":true}", 11, NULL);
    }
    served_release(sm);
    json_decref(o);
}

/* Each malloc arena's size from glibc's malloc_info XML: arenas appearing
 * or growing late are what make RSS creep while the memory in use is flat
 * (docs/RELIABILITY.md). Writes "[a,b,...]" into out; returns the count. */
static int debug_arenas_json(char *out, size_t cap, size_t *mmapped_chunks)
{
    char *xml = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&xml, &len);
    int n = 0;
    size_t used = 0;
    *mmapped_chunks = 0;
    out[used++] = '[';
    if (f && malloc_info(0, f) == 0 && fflush(f) == 0 && xml) {
        const char *p = xml;
        const char *cur = "<system type=\"current\" size=\"";
        while ((p = strstr(p, "<heap nr=\"")) != NULL) {
            const char *end = strstr(p, "</heap>");
            const char *c = strstr(p, cur);
            if (!end || !c || c > end)
                break;
            unsigned long long sz = strtoull(c + strlen(cur), NULL, 10);
            int w = snprintf(out + used, cap - used, "%s%llu", n ? "," : "", sz);
            if (w < 0 || (size_t)w >= cap - used - 1)
                break;
            used += (size_t)w;
            n++;
            p = end;
        }
        const char *mm = strstr(xml, "<total type=\"mmap\" count=\"");
        if (mm)
            *mmapped_chunks = (size_t)strtoull(mm + strlen("<total type=\"mmap\" count=\""), NULL, 10);
    }
    if (f)
        fclose(f);
    free(xml);
    out[used++] = ']';
    out[used] = 0;
    return n;
}

/* GET /debug/memory: the allocator's own view (glibc mallinfo2 and
 * malloc_info), so a soak can tell memory in use from memory the heap
 * merely holds, and see which arena holds it; and SQLite's share of the
 * heap, so that its page caches filling up are not taken for a leak. */
static void debug_memory(struct http_request *req, const struct route_match *m, void *ctx)
{
    (void)m;
    const struct api_state *st = ctx;
    struct mallinfo2 mi = mallinfo2();
    char arenas[512];
    size_t chunks;
    int narenas = debug_arenas_json(arenas, sizeof arenas, &chunks);
    char sqlite[160] = "";
    if (st->jobs) {
        struct state_memory sm;
        state_memory(jobs_state(st->jobs), &sm);
        snprintf(sqlite, sizeof sqlite,
                 ",\"sqlite_bytes\":%lld,\"sqlite_peak_bytes\":%lld,\"sqlite_cache_bytes\":%lld",
                 (long long)sm.sqlite_bytes, (long long)sm.sqlite_peak_bytes,
                 (long long)sm.cache_bytes);
    }
    char body[1024];
    int n = snprintf(body, sizeof body,
                     "{\"heap_in_use_bytes\":%zu,\"heap_free_bytes\":%zu,\"heap_bytes\":%zu,"
                     "\"mmapped_bytes\":%zu,\"mmapped_chunks\":%zu,\"arenas\":%d,"
                     "\"arena_bytes\":%s%s}",
                     mi.uordblks + mi.hblkhd, mi.fordblks, mi.arena, mi.hblkhd, chunks, narenas,
                     arenas, sqlite);
    http_respond(req, 200, "application/json", body, (size_t)n, NULL);
}

int api_debug_register(struct router *r, struct api_state *st, struct error *err)
{
    int rc;
    if ((rc = router_add(r, HTTP_M_GET, "/debug/memory", debug_memory, st, err)))
        return rc;
    if ((rc = router_add(r, HTTP_M_GET, "/debug/delay", debug_delay, NULL, err)) ||
        (rc = router_add(r, HTTP_M_POST | HTTP_M_PUT, "/debug/echo", debug_echo, NULL, err)) ||
        (rc = router_add(r, HTTP_M_POST, "/debug/fault", debug_fault, st, err)))
        return rc;
    return 0;
}

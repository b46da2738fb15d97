/* api_logging.c - Triton's logging extension: GET and POST /v2/logging
 * read and change the log level at run time (tritonclient's
 * get_log_settings / update_log_settings). An admin's route once keys
 * exist (auth.c).
 *
 * Triton's settings map onto batchgate's one level: log_verbose_level > 0
 * is debug; else log_info is info, log_warning warn; errors are always
 * logged (log_error false is refused). The file and the format are
 * reported and cannot change at run time (the file: --config's log_file). */
#include "gateway/api.h"

#include <stdbool.h>
#include <string.h>

#include <jansson.h>

#include "common/buf.h"
#include "common/log.h"
#include "serving/tensor_json.h"

static void logging_answer(struct http_request *req, struct api_state *st)
{
    enum log_level lv = log_get_level(log_default());
    struct buf b = BUF_INIT;
    const char *file = st->log_file ? st->log_file : "";
    buf_append(&b, "{\"log_file\":", 12);
    json_append_string(&b, file, strlen(file));
    buf_appendf(&b, ",\"log_info\":%s,\"log_warning\":%s,\"log_error\":true,"
                    "\"log_verbose_level\":%d,\"log_format\":\"default\"}",
                lv <= LOG_INFO ? "true" : "false", lv <= LOG_WARN ? "true" : "false",
                lv == LOG_DEBUG ? 1 : 0);
    http_respond(req, 200, "application/json", b.data, b.len, NULL);
    buf_free(&b);
}

static void logging_get(struct http_request *req, const struct route_match *m, void *ctx)
{
    (void)m;
    logging_answer(req, ctx);
}

/* A boolean setting: 1 when given (*v set), 0 when absent, or answers 400
 * and -1. */
static int logging_bool(struct http_request *req, json_t *root, const char *key, bool *v)
{
    json_t *j = json_object_get(root, key);
    if (!j)
        return 0;
    if (!json_is_boolean(j)) {
        http_respond_error(req, 400, NULL, "%s: must be true or false", key);
        return -1;
    }
    *v = json_is_true(j);
    return 1;
}

static void logging_post(struct http_request *req, const struct route_match *m, void *ctx)
{
    (void)m;
    struct api_state *st = ctx;
    json_t *root = api_body_object(req, false, "of log settings (log_info, log_warning, "
                                   "log_error, log_verbose_level, ...)");
    if (!root)
        return;
    enum log_level lv = log_get_level(log_default());
    bool info = lv <= LOG_INFO, warning = lv <= LOG_WARN, error = true;
    json_int_t verbose = lv == LOG_DEBUG;
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) {
        if (strcmp(key, "log_info") && strcmp(key, "log_warning") && strcmp(key, "log_error") &&
            strcmp(key, "log_verbose_level") && strcmp(key, "log_format") &&
            strcmp(key, "log_file")) {
            http_respond_error(req, 400, NULL, "%.64s: not a log setting (log_info, log_warning, "
                               "log_error, log_verbose_level, log_format, log_file)", key);
            goto out;
        }
    }
    int gave_info = 0, gave_warning = 0;
    if ((gave_info = logging_bool(req, root, "log_info", &info)) < 0 ||
        (gave_warning = logging_bool(req, root, "log_warning", &warning)) < 0 ||
        logging_bool(req, root, "log_error", &error) < 0)
        goto out;
    if (!error) {
        http_respond_error(req, 400, NULL, "log_error: errors are always logged");
        goto out;
    }
    bool gave_verbose = false;
    if ((v = json_object_get(root, "log_verbose_level"))) {
        if (!json_is_integer(v) || json_integer_value(v) < 0) {
            http_respond_error(req, 400, NULL, "log_verbose_level: must be an integer >= 0");
            goto out;
        }
        verbose = json_integer_value(v);
        gave_verbose = true;
    }
    if ((v = json_object_get(root, "log_format")) &&
        (!json_is_string(v) || strcmp(json_string_value(v), "default") != 0)) {
        http_respond_error(req, 400, NULL, "log_format: only \"default\" is served");
        goto out;
    }
    const char *file = st->log_file ? st->log_file : "";
    if ((v = json_object_get(root, "log_file")) &&
        (!json_is_string(v) || strcmp(json_string_value(v), file) != 0)) {
        http_respond_error(req, 400, NULL, "log_file: the log file cannot change at run time "
                           "(it is \"%s\": log_file in the config)", file);
        goto out;
    }
    /* The levels are one ladder (debug logs info, info logs warnings):
     * what the body gives holds, a level it turns on turns on those below
     * it, one it turns off turns off those above, and what it gives that
     * the ladder cannot hold is refused. Each was kept at the current
     * level instead: {"log_info": false} at debug answered 200 and changed
     * nothing, and {"log_verbose_level": 1} at warn was refused. */
    bool up_info = (gave_info && info) || (gave_verbose && verbose > 0);
    bool down_info = (gave_info && !info) || (gave_warning && !warning);
    if (up_info && down_info) {
        http_respond_error(req, 400, NULL, "%s with %s: the levels are a ladder (debug logs "
                           "info, info logs warnings)",
                           gave_verbose && verbose > 0 ? "log_verbose_level > 0" : "log_info: true",
                           gave_warning && !warning ? "log_warning: false" : "log_info: false");
        goto out;
    }
    if (up_info)
        info = warning = true;
    if (down_info)
        info = false, verbose = 0;
    enum log_level want = verbose > 0 ? LOG_DEBUG : info ? LOG_INFO : warning ? LOG_WARN
                                                                             : LOG_ERROR;
    /* Said at the more verbose of the two levels, where a warning shows:
     * after a change that turns levels on (leaving error, it was never
     * said), before one that turns them off. */
    bool on = want < lv;
    if (on)
        log_set_level(log_default(), want);
    if (want != lv)
        log_warn("log level %s -> %s (POST /v2/logging)", log_level_name(lv),
                 log_level_name(want));
    if (!on)
        log_set_level(log_default(), want);
    logging_answer(req, st);
out:
    json_decref(root);
}

int api_logging_register(struct router *r, struct api_state *st, struct error *err)
{
    static const char *const logging[] = {"logging", NULL};
    static const struct api_route routes[] = {
        {HTTP_M_GET, "/v2/logging", logging_get, logging},
        {HTTP_M_POST, "/v2/logging", logging_post, logging},
    };
    return api_routes_add(r, st, routes, sizeof routes / sizeof routes[0], err);
}

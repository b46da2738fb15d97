/* api_body.c - see api.h: a request body read as the JSON object an
 * operator route takes, with one way of saying what is wrong with it. */
#include "gateway/api.h"

#include "common/jsonfmt.h"
#include "serving/tensor_json.h"

json_t *api_body_object(struct http_request *req, bool empty_ok, const char *shape)
{
    size_t len;
    const char *body = http_request_body(req, &len);
    if ((!body || len == 0) && empty_ok)
        return json_object();
    /* An operator's body is small: one of more values than any needs is
     * not parsed (each a node of ~50 bytes: jsonfmt.h). */
    uint64_t values = body ? json_values_at_least(body, len) : 0;
    if (values > JSON_VALUES_ANY) {
        http_respond_error(req, 400, NULL, "the body holds %llu JSON values, more than %u: "
                           "refused before it is read", (unsigned long long)values,
                           JSON_VALUES_ANY);
        return NULL;
    }
    json_error_t je;
    json_t *root = json_loadb(body ? body : "", body ? len : 0, JSON_REJECT_DUPLICATES, &je);
    if (json_is_object(root))
        return root;
    if (!root) {
        char at[48];
        http_respond_error(req, 400, NULL, "invalid JSON at %s: %s; the body must be a JSON "
                           "object %s", tensor_json_where(at, sizeof at, je.line, je.column),
                           je.text, shape);
    } else {
        json_decref(root);
        http_respond_error(req, 400, NULL, "the body must be a JSON object %s", shape);
    }
    return NULL;
}

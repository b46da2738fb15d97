/* http_request.c - the request object: allocation, recycling, accessors. */
#include "http/http_impl.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Buffer bytes a recycled request keeps, each of head, body and held answer. */
#define HTTP_REQUEST_KEEP (4u << 10)

struct http_request *http_request_new(struct http_conn *conn)
{
    struct http_request *r = calloc(1, sizeof *r);
    if (r)
        r->conn = conn;
    return r;
}

void http_request_reset(struct http_request *r)
{
    struct http_conn *conn = r->conn;
    struct buf head = r->head, body = r->body, resp = r->resp;
    struct http_header *hdrs = r->hdrs;
    int cap = r->hdrs_cap;
    buf_reset(&head);
    buf_reset(&body);
    buf_reset(&resp);
    /* A spare waits in its IO thread's pool (http_conn.c: conn_recycle) for
     * any request of any connection: it keeps buffers for a typical request
     * only. A rare large body or answer (or a refused oversized one) would
     * otherwise stay in the pool for good, and the pool's memory would
     * creep up to 32 times the largest of each (the soak saw it). */
    buf_shrink(&head, HTTP_REQUEST_KEEP);
    buf_shrink(&body, HTTP_REQUEST_KEEP);
    buf_shrink(&resp, HTTP_REQUEST_KEEP);
    if (cap > 64) {   /* a request with very many headers: its index goes too */
        free(hdrs);
        hdrs = NULL;
        cap = 0;
    }
    memset(r, 0, sizeof *r);
    r->conn = conn;
    r->head = head;
    r->body = body;
    r->resp = resp;
    r->hdrs = hdrs;
    r->hdrs_cap = cap;
}

void http_request_free(struct http_request *r)
{
    if (!r)
        return;
    buf_free(&r->head);
    buf_free(&r->body);
    buf_free(&r->resp);
    free(r->hdrs);
    free(r);
}

int http_request_method(const struct http_request *r) { return r->method; }

const char *http_request_method_name(const struct http_request *r)
{
    return llhttp_method_name((llhttp_method_t)r->llhttp_method);
}

const char *http_request_path(const struct http_request *r, size_t *len)
{
    *len = r->path_len;
    return r->path_len ? r->head.data : "";
}

const char *http_request_query(const struct http_request *r, size_t *len)
{
    if (r->path_len >= r->url_len) {
        *len = 0;
        return NULL;
    }
    *len = r->url_len - r->path_len - 1;
    return r->head.data + r->path_len + 1;
}

const char *http_request_header(const struct http_request *r, const char *name, size_t *len)
{
    size_t n = strlen(name);
    for (int i = 0; i < r->nhdrs; i++) {
        const struct http_header *h = &r->hdrs[i];
        if (h->name_len == n && strncasecmp(r->head.data + h->name_off, name, n) == 0) {
            *len = h->val_len;
            return h->val_len ? r->head.data + h->val_off : "";
        }
    }
    *len = 0;
    return NULL;
}

int http_request_header_count(const struct http_request *r) { return r->nhdrs; }

void http_request_header_at(const struct http_request *r, int i, const char **name,
                            size_t *name_len, const char **value, size_t *value_len)
{
    const struct http_header *h = &r->hdrs[i];
    *name = r->head.data + h->name_off;
    *name_len = h->name_len;
    *value = h->val_len ? r->head.data + h->val_off : "";
    *value_len = h->val_len;
}

int http_request_minor(const struct http_request *r) { return r->http_minor; }

const char *http_request_body(const struct http_request *r, size_t *len)
{
    *len = r->body.len;
    return r->body.len ? r->body.data : NULL;
}

int http_request_has_body(const struct http_request *r) { return r->has_body; }
int64_t http_request_content_length(const struct http_request *r)
{
    return r->has_body ? r->content_length : 0;
}

void http_request_on_abort(struct http_request *r, void (*fn)(struct http_request *, void *),
                           void *arg)
{
    r->abort_fn = fn;
    r->abort_arg = arg;
}

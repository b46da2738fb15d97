/* http.h - what a route handler sees of an HTTP request, and how it answers.
 *
 * A request belongs to its connection's IO thread. A handler either answers
 * at once or keeps the request and answers later on the same IO thread (the
 * batcher hands completions back through that thread's mailbox). Each request
 * is answered exactly once; responses leave in request order whatever order
 * they are produced in. */
#ifndef BG_HTTP_H
#define BG_HTTP_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

struct mailbox;

enum http_method {
    HTTP_M_GET = 1 << 0,
    HTTP_M_HEAD = 1 << 1,
    HTTP_M_POST = 1 << 2,
    HTTP_M_PUT = 1 << 3,
    HTTP_M_DELETE = 1 << 4,
    HTTP_M_OPTIONS = 1 << 5,
    HTTP_M_PATCH = 1 << 6,
    HTTP_M_OTHER = 1 << 7,
};

struct http_request;

int http_request_method(const struct http_request *req);   /* one enum http_method bit */
const char *http_request_method_name(const struct http_request *req);
/* The path without the query, not decoded; *len set. Never NULL. */
const char *http_request_path(const struct http_request *req, size_t *len);
/* The query after '?', or NULL when there is none. */
const char *http_request_query(const struct http_request *req, size_t *len);
/* Case-insensitive lookup of the first header `name`; NULL when absent. */
const char *http_request_header(const struct http_request *req, const char *name, size_t *len);
/* The decoded body (chunked encoding removed); NULL with *len 0 when empty. */
const char *http_request_body(const struct http_request *req, size_t *len);

/* Answers the request. `extra_headers` is NULL or preformatted "Name: value\r\n"
 * lines (Allow, Retry-After, ...). body may be NULL when len is 0. The body is
 * copied; HEAD requests get the headers only. */
void http_respond(struct http_request *req, int status, const char *content_type,
                  const void *body, size_t len, const char *extra_headers);
/* {"error": "<message>"} with the given status. */
void http_respond_error(struct http_request *req, int status, const char *extra_headers,
                        const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* A request whose connection went away before it was answered: `on_abort` is
 * called once on the IO thread so its owner can stop work early; the owner
 * must still call http_respond (the answer is then discarded). */
void http_request_on_abort(struct http_request *req, void (*on_abort)(struct http_request *, void *),
                           void *arg);
/* The event_base of the request's IO thread (for handler timers). */
struct event_base *http_request_event_base(const struct http_request *req);
/* The mailbox of the request's IO thread: work finished elsewhere comes back through it. */
struct mailbox *http_request_mailbox(const struct http_request *req);
/* When the request's last byte was read (now_ns clock). */
int64_t http_request_received_ns(const struct http_request *req);
/* Index of the request's IO thread (0..io_threads-1): the shard to record into. */
int http_request_thread(const struct http_request *req);

#endif

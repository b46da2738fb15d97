/* error.h - the one error vocabulary of batchgate.
 *
 * Each code carries its HTTP status and its metric `reason` label in one
 * X-macro row, so the three can never disagree. Functions return 0 or a
 * negative BG_E* code and fill a struct error with a message a user can act
 * on (naming the file, field or input that is wrong). */
#ifndef BG_ERROR_H
#define BG_ERROR_H

#include <stdarg.h>

/*        name              http  reason (metrics label) */
#define BG_ERRORS(X)                                        \
    X(BG_EINVAL,            400, "bad_request")             \
    X(BG_EUNAUTHORIZED,     401, "unauthorized")            \
    X(BG_EFORBIDDEN,        403, "forbidden")               \
    X(BG_ENOTFOUND,         404, "not_found")               \
    X(BG_EMETHOD,           405, "method_not_allowed")      \
    X(BG_EHEADERTIMEOUT,    408, "header_timeout")          \
    X(BG_EBODYTOOLARGE,     413, "body_too_large")          \
    X(BG_ETOOLONG,          413, "input_too_long")          \
    X(BG_EQUEUEFULL,        429, "queue_full")              \
    X(BG_ETENANTLIMIT,      429, "tenant_limit")            \
    X(BG_EHEADERTOOLARGE,   431, "header_too_large")        \
    X(BG_EBACKEND,          500, "backend")                 \
    X(BG_EUPSTREAM,         502, "upstream")                \
    X(BG_ENOMEM,            500, "out_of_memory")           \
    X(BG_EINTERNAL,         500, "internal")                \
    X(BG_ENOTREADY,         503, "not_ready")               \
    X(BG_ESHUTDOWN,         503, "shutdown")                \
    X(BG_EUNAVAILABLE,      503, "unavailable")             \
    X(BG_ESTORAGE,          503, "storage")                 \
    X(BG_EDEADLINE,         504, "deadline")                \
    X(BG_ECANCELLED,        499, "cancelled")               \
    X(BG_ECONFIG,           500, "config")                  \
    X(BG_EIO,               500, "io")

enum bg_errcode {
    BG_OK = 0,
#define BG_ERR_ENUM(name, http, reason) name,
    BG_ERRORS(BG_ERR_ENUM)
#undef BG_ERR_ENUM
    BG__ECOUNT
};
/* Codes are positive in the enum; functions return them negated (-BG_EINVAL). */

struct error {
    int code;          /* a BG_E* value, 0 when no error */
    char msg[512];     /* human-readable; what is wrong and where */
};

/* Fills err (if not NULL) and returns -code, so `return error_set(...)` reads well. */
int error_set(struct error *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int error_setv(struct error *err, int code, const char *fmt, va_list ap);
void error_clear(struct error *err);

const char *error_name(int code);     /* "BG_EINVAL" */
int error_http_status(int code);      /* 400 */
const char *error_reason(int code);   /* "bad_request" */

#endif

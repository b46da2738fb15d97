/* error.c - struct error helpers and the code tables generated from BG_ERRORS. */
#include "common/error.h"

#include <stdio.h>
#include <string.h>

static const struct {
    const char *name;
    int http;
    const char *reason;
} error_table[BG__ECOUNT] = {
    [0] = {"BG_OK", 200, "ok"},
#define BG_ERR_ROW(name, http, reason) [name] = {#name, http, reason},
    BG_ERRORS(BG_ERR_ROW)
#undef BG_ERR_ROW
};

static int error_index(int code)
{
    if (code < 0)
        code = -code;
    return code < BG__ECOUNT ? code : BG_EINTERNAL;
}

int error_setv(struct error *err, int code, const char *fmt, va_list ap)
{
    int c = error_index(code);
    if (err) {
        err->code = c;
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    }
    return -c;
}

int error_set(struct error *err, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = error_setv(err, code, fmt, ap);
    va_end(ap);
    return rc;
}

void error_clear(struct error *err)
{
    if (err) {
        err->code = 0;
        err->msg[0] = '\0';
    }
}

const char *error_name(int code) { return error_table[error_index(code)].name; }
int error_http_status(int code) { return error_table[error_index(code)].http; }
const char *error_reason(int code) { return error_table[error_index(code)].reason; }

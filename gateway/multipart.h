/* multipart.h - multipart/form-data bodies (RFC 7578), as the `openai`
 * client sends a file upload (POST /v1/files: `purpose`, then `file`). A
 * pure function over the body: no copy, the parts point into it. */
#ifndef BG_MULTIPART_H
#define BG_MULTIPART_H

#include <stdbool.h>
#include <stddef.h>

struct multipart_part {
    char name[64];                    /* Content-Disposition's name ("" when none) */
    char filename[256];               /* and its filename ("" when none), quoted-pairs undone */
    bool filename_cut;                /* a filename was given that does not fit (or is malformed) */
    const char *data;                 /* the part's bytes, in the body */
    size_t len;
};

/* The value of parameter `key` of a header value such as
 * `multipart/form-data; boundary="abc"` (quoted or not, the key's case
 * ignored) into out; false when absent or longer than cap - 1. */
bool multipart_param(const char *h, size_t n, const char *key, char *out, size_t cap);

/* The parts of body under content type ct (the request's Content-Type),
 * up to max of them (more are skipped); -1 when ct is not multipart/form-data
 * with a boundary, or the body is not made of its delimited parts through
 * the closing delimiter. Text before the first delimiter (a preamble) and
 * after the last is ignored. */
int multipart_parse(const char *ct, size_t ct_len, const char *body, size_t len,
                    struct multipart_part *parts, int max);

#endif

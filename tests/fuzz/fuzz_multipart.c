/* fuzz_multipart.c - a POST /v1/files body (gateway/multipart.c): any
 * Content-Type and any body.
 *
 * Input layout: byte 0 is the Content-Type's length n; the next n bytes are
 * it (fewer when the input is shorter); the rest is the body.
 *
 * Beyond "no crash, no leak": every part lies inside the body and after the
 * one before; names are NUL-terminated within their arrays; room for one
 * part gives the same verdict and the same first part as room for eight. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gateway/multipart.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    size_t n = data[0];
    if (n > size - 1)
        n = size - 1;
    const char *ct = (const char *)data + 1;
    const char *body = ct + n;
    size_t len = size - 1 - n;
    /* Copies, so that ASan sees any read past either. */
    char *c = malloc(n ? n : 1), *b = malloc(len ? len : 1);
    memcpy(c, ct, n);
    memcpy(b, body, len);
    struct multipart_part p8[8], p1[1];
    int r8 = multipart_parse(c, n, b, len, p8, 8);
    int r1 = multipart_parse(c, n, b, len, p1, 1);
    if (r8 < -1 || r8 > 8 || (r8 < 0) != (r1 < 0) || (r8 >= 0 && r1 != (r8 > 0)))
        abort();
    const char *prev = b;
    for (int i = 0; i < r8; i++) {
        if (p8[i].data < prev || p8[i].data > b + len || p8[i].len > (size_t)(b + len - p8[i].data))
            abort();
        if (!memchr(p8[i].name, 0, sizeof p8[i].name) ||
            !memchr(p8[i].filename, 0, sizeof p8[i].filename))
            abort();
        prev = p8[i].data + p8[i].len;
    }
    if (r1 == 1 && (p1[0].data != p8[0].data || p1[0].len != p8[0].len ||
                    strcmp(p1[0].name, p8[0].name) != 0))
        abort();
    free(c);
    free(b);
    return 0;
}

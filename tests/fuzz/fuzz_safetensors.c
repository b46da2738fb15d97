/* fuzz_safetensors.c - the safetensors loader on arbitrary bytes.
 *
 * The input is the whole file. safetensors_open_mem runs the same validation
 * safetensors_open runs on its mapping, but over libFuzzer's own heap copy of
 * the input, which ends exactly at the last byte: a tensor reaching one byte
 * too far is an ASan report here, where in a page-sized mapping it would read
 * zeros silently.
 *
 * Beyond "no crash, no leak": every tensor of a file that opens lies inside
 * the data buffer, its byte count agrees with its dtype and shape, the
 * non-empty ones do not overlap, and lookups by name find it. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backends/safetensors.h"

static unsigned dtype_bits(const char *name)
{
    static const struct {
        const char *name;
        unsigned bits;
    } sizes[] = {{"F4", 4}, {"F6_E2M3", 6}, {"F6_E3M2", 6}, {"BOOL", 8}, {"U8", 8}, {"I8", 8},
                 {"F8_E4M3", 8}, {"F8_E5M2", 8}, {"F8_E8M0", 8}, {"F8_E4M3FNUZ", 8},
                 {"F8_E5M2FNUZ", 8}, {"F16", 16}, {"BF16", 16}, {"I16", 16}, {"U16", 16},
                 {"F32", 32}, {"I32", 32}, {"U32", 32}, {"F64", 64}, {"I64", 64}, {"U64", 64},
                 {"C64", 64}};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        if (strcmp(sizes[i].name, name) == 0)
            return sizes[i].bits;
    abort();   /* a dtype the loader accepted but the format does not have */
}

static void check(const struct safetensors *st, const uint8_t *data, size_t size)
{
    int n = safetensors_count(st);
    const uint8_t *end_prev = NULL;
    for (int i = 0; i < n; i++) {
        const struct st_tensor *t = safetensors_at(st, i);
        const uint8_t *b = t->data;
        if (b < data + 8 || b > data + size || t->nbytes > (size_t)(data + size - b))
            abort();
        if (t->ndim < 0 || t->ndim > ST_MAX_DIMS)
            abort();
        /* A zero dimension makes the product 0 however large the others are. */
        int64_t nelem = 1;
        for (int d = 0; d < t->ndim; d++)
            if (t->shape[d] == 0)
                nelem = 0;
        for (int d = 0; d < t->ndim && nelem; d++)
            nelem *= t->shape[d];   /* the loader proved this fits */
        if (nelem != t->nelem ||
            (uint64_t)nelem * dtype_bits(t->dtype_name) != (uint64_t)t->nbytes * 8)
            abort();
        /* Sorted by offset: a non-empty tensor starts after the previous one ends. */
        if (t->nbytes) {
            if (end_prev && b < end_prev)
                abort();
            if (!end_prev || b + t->nbytes > end_prev)
                end_prev = b + t->nbytes;
        }
        unsigned sum = 0;   /* every byte, so ASan sees a read past the input */
        for (size_t j = 0; j < t->nbytes; j++)
            sum += b[j];
        (void)sum;
        if (safetensors_find(st, t->name) != t)
            abort();
        const struct st_tensor *w;
        struct error err = {0};
        if ((safetensors_weight(st, t->name, &w, &err) == 0) != (t->usable != 0))
            abort();
        if (t->usable && t->dtype == DTYPE_F32 && t->nbytes >= 4) {
            float f;
            memcpy(&f, b + t->nbytes - 4, sizeof f);   /* unaligned, as the header says */
            (void)f;
        }
    }
    if (safetensors_at(st, n) || safetensors_at(st, -1))
        abort();
    (void)safetensors_metadata(st, "format");
    (void)safetensors_find(st, "");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct safetensors *st = NULL;
    struct error err = {0};
    int rc = safetensors_open_mem("fuzz.safetensors", data, size, &st, &err);
    if (rc == 0) {
        if (!st || safetensors_file_bytes(st) != size)
            abort();
        check(st, data, size);
    } else if (st || err.code == 0 || !strstr(err.msg, "fuzz.safetensors")) {
        abort();   /* a refusal names the file and hands nothing out */
    }
    safetensors_close(st);
    return 0;
}

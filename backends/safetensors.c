/* safetensors.c - see safetensors.h.
 *
 * Order of work in safetensors_open(): map the file, check the header length
 * against the file, parse the header JSON, check every entry (dtype, shape,
 * offsets, size) with overflow-safe arithmetic, then sort by offset and check
 * that no two tensors share a byte. Only then are data pointers handed out.
 *
 * Where the reference implementation is stricter than safety needs, we are
 * lenient about layout: gaps between tensors, bytes after the last one and
 * empty tensors placed inside another are accepted (no byte is read twice or
 * out of bounds). Where it is lenient we are strict: unknown fields in an
 * entry, duplicate keys and more than ST_MAX_DIMS dimensions are errors,
 * because they mean a writer we do not understand. */
#include "backends/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

struct safetensors {
    char *path;
    const unsigned char *map;       /* the whole file, PROT_READ */
    bool map_owned;                 /* our mmap (safetensors_open), not the caller's bytes */
    size_t file_bytes;
    json_t *header;                 /* owns the tensor names and metadata strings */
    json_t *metadata;               /* borrowed from header; NULL when absent */
    int count;
    struct st_tensor *tensors;      /* sorted by data offset */
    const struct st_tensor **by_name;   /* sorted by name, for bsearch */
};

/* Sizes are in bits: F4 and F6 pack several elements per byte. */
static const struct st_dtype {
    const char *name;
    unsigned bits;
    int usable;
    enum dtype dtype;
} st_dtypes[] = {
    {"F32", 32, 1, DTYPE_F32},
    {"F16", 16, 1, DTYPE_F16},
    {"BF16", 16, 1, DTYPE_BF16},
    {"BOOL", 8, 0, DTYPE_F32},
    {"U8", 8, 0, DTYPE_F32},
    {"I8", 8, 0, DTYPE_F32},
    {"I16", 16, 0, DTYPE_F32},
    {"U16", 16, 0, DTYPE_F32},
    {"I32", 32, 0, DTYPE_F32},
    {"U32", 32, 0, DTYPE_F32},
    {"I64", 64, 0, DTYPE_F32},
    {"U64", 64, 0, DTYPE_F32},
    {"F64", 64, 0, DTYPE_F32},
    {"C64", 64, 0, DTYPE_F32},
    {"F8_E4M3", 8, 0, DTYPE_F32},
    {"F8_E5M2", 8, 0, DTYPE_F32},
    {"F8_E8M0", 8, 0, DTYPE_F32},
    {"F8_E4M3FNUZ", 8, 0, DTYPE_F32},
    {"F8_E5M2FNUZ", 8, 0, DTYPE_F32},
    {"F6_E2M3", 6, 0, DTYPE_F32},
    {"F6_E3M2", 6, 0, DTYPE_F32},
    {"F4", 4, 0, DTYPE_F32},
};

static const struct st_dtype *safetensors_dtype_lookup(const char *name)
{
    for (size_t i = 0; i < sizeof st_dtypes / sizeof st_dtypes[0]; i++)
        if (strcmp(st_dtypes[i].name, name) == 0)
            return &st_dtypes[i];
    return NULL;
}

/* What open() needs to word an error about the entry at hand. */
struct st_ctx {
    const char *path;
    struct error *err;
    const unsigned char *data;      /* start of the data buffer */
    uint64_t data_len;
    const char *name;               /* tensor being checked, for messages */
    char shown[128];                /* name, made safe to print */
};

/* Names come from the file: cut them short and replace control bytes so a
 * hostile name cannot flood or forge a log line. */
static void safetensors_show_name(char *out, size_t cap, const char *name)
{
    size_t n = 0, max = cap - 4;    /* room for "..." and NUL */
    for (; name[n] && n < max; n++) {
        unsigned char c = (unsigned char)name[n];
        out[n] = (c < 0x20 || c == 0x7f || c == '"' || c == '\\') ? '?' : (char)c;
    }
    if (name[n]) {
        while (n > 0 && ((unsigned char)out[n - 1] & 0xc0) == 0x80)
            n--;                    /* do not end inside a UTF-8 sequence */
        if (n > 0 && ((unsigned char)out[n - 1] & 0xc0) == 0xc0)
            n--;
        memcpy(out + n, "...", 3);
        n += 3;
    }
    out[n] = '\0';
}

static const char *safetensors_json_type_name(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a real number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    case JSON_NULL: return "null";
    }
    return "?";
}

/* "[5, 6]" into buf; 8 dims of 20 digits fit in 200 bytes. */
static const char *safetensors_format_shape(char *buf, size_t cap, const uint64_t *dims, int ndim)
{
    size_t n = 0;
    buf[n++] = '[';
    for (int i = 0; i < ndim && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%" PRIu64, i ? ", " : "", dims[i]);
    if (n < cap - 1) {
        buf[n++] = ']';
        buf[n] = '\0';
    } else {
        buf[cap - 1] = '\0';
    }
    return buf;
}

static int safetensors_tensor_error(struct st_ctx *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* "path: tensor "name": " + the problem. */
static int safetensors_tensor_error(struct st_ctx *c, const char *fmt, ...)
{
    char what[384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return error_set(c->err, BG_EINVAL, "%s: tensor \"%s\": %s", c->path, c->shown, what);
}

/* A JSON integer in 0..INT64_MAX. */
static int safetensors_get_count(const json_t *v, uint64_t *out)
{
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return -1;
    *out = (uint64_t)json_integer_value(v);
    return 0;
}

static int safetensors_parse_shape(struct st_ctx *c, const json_t *shape, uint64_t *dims, int *ndim)
{
    if (!json_is_array(shape))
        return safetensors_tensor_error(c, "shape must be an array, not %s", safetensors_json_type_name(shape));
    size_t n = json_array_size(shape);
    if (n > ST_MAX_DIMS)
        return safetensors_tensor_error(c, "shape has %zu dimensions, at most %d are supported", n,
                            ST_MAX_DIMS);
    for (size_t i = 0; i < n; i++) {
        const json_t *d = json_array_get(shape, i);
        if (safetensors_get_count(d, &dims[i]) == 0)
            continue;
        if (json_is_integer(d))
            return safetensors_tensor_error(c, "shape[%zu] is %" JSON_INTEGER_FORMAT
                                ", dimensions must be non-negative", i, json_integer_value(d));
        return safetensors_tensor_error(c, "shape[%zu] must be a non-negative integer, not %s", i,
                            safetensors_json_type_name(d));
    }
    *ndim = (int)n;
    return 0;
}

static int safetensors_parse_offsets(struct st_ctx *c, const json_t *offs, uint64_t *begin, uint64_t *end)
{
    if (!json_is_array(offs) || json_array_size(offs) != 2 ||
        safetensors_get_count(json_array_get(offs, 0), begin) < 0 ||
        safetensors_get_count(json_array_get(offs, 1), end) < 0) {
        char *text = json_dumps(offs, JSON_ENCODE_ANY);
        int rc = safetensors_tensor_error(c, "data_offsets %.80s%s must be [begin, end], two non-negative "
                              "integers", text ? text : "?",
                              text && strlen(text) > 80 ? "..." : "");
        free(text);
        return rc;
    }
    if (*end < *begin)
        return safetensors_tensor_error(c, "data_offsets [%" PRIu64 ", %" PRIu64 "] end before begin",
                            *begin, *end);
    if (*end > c->data_len)
        return safetensors_tensor_error(c, "data_offsets [%" PRIu64 ", %" PRIu64 "] end past the %" PRIu64
                            "-byte data buffer", *begin, *end, c->data_len);
    return 0;
}

/* Checks one entry and fills t. Nothing in the data buffer is read. */
static int safetensors_parse_tensor(struct st_ctx *c, const json_t *entry, struct st_tensor *t)
{
    if (!json_is_object(entry))
        return safetensors_tensor_error(c, "entry must be an object, not %s", safetensors_json_type_name(entry));
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)entry, key, v) {
        if (strcmp(key, "dtype") && strcmp(key, "shape") && strcmp(key, "data_offsets")) {
            char shown[64];
            safetensors_show_name(shown, sizeof shown, key);
            return safetensors_tensor_error(c, "unknown field \"%s\" (expected dtype, shape, data_offsets)",
                                shown);
        }
    }
    static const char *const required[] = {"dtype", "shape", "data_offsets"};
    for (size_t i = 0; i < 3; i++)
        if (!json_object_get(entry, required[i]))
            return safetensors_tensor_error(c, "missing \"%s\"", required[i]);

    const json_t *jdt = json_object_get(entry, "dtype");
    if (!json_is_string(jdt))
        return safetensors_tensor_error(c, "dtype must be a string, not %s", safetensors_json_type_name(jdt));
    const struct st_dtype *dt = safetensors_dtype_lookup(json_string_value(jdt));
    if (!dt) {
        char shown[64];
        safetensors_show_name(shown, sizeof shown, json_string_value(jdt));
        return safetensors_tensor_error(c, "unknown dtype \"%s\"", shown);
    }

    uint64_t dims[ST_MAX_DIMS];
    int ndim = 0;
    int rc = safetensors_parse_shape(c, json_object_get(entry, "shape"), dims, &ndim);
    if (rc)
        return rc;
    char shape[200];
    safetensors_format_shape(shape, sizeof shape, dims, ndim);

    /* A zero anywhere makes the product 0 even when the other dims alone
     * would overflow, so look for it before multiplying. */
    uint64_t nelem = 1;
    for (int i = 0; i < ndim; i++)
        if (dims[i] == 0)
            nelem = 0;
    for (int i = 0; i < ndim && nelem; i++)
        if (__builtin_mul_overflow(nelem, dims[i], &nelem) || nelem > INT64_MAX)
            return safetensors_tensor_error(c, "%s %s has more elements than 64 bits can count", dt->name,
                                shape);
    uint64_t nbits;
    if (__builtin_mul_overflow(nelem, (uint64_t)dt->bits, &nbits))
        return safetensors_tensor_error(c, "%s %s: byte size overflows 64 bits", dt->name, shape);
    if (nbits % 8)
        return safetensors_tensor_error(c, "%s %s is %" PRIu64 " bits, not a whole number of bytes",
                            dt->name, shape, nbits);
    uint64_t need = nbits / 8;

    uint64_t begin = 0, end = 0;
    rc = safetensors_parse_offsets(c, json_object_get(entry, "data_offsets"), &begin, &end);
    if (rc)
        return rc;
    if (end - begin != need)
        return safetensors_tensor_error(c, "data_offsets [%" PRIu64 ", %" PRIu64 "] hold %" PRIu64
                            " bytes but %s %s needs %" PRIu64,
                            begin, end, end - begin, dt->name, shape, need);

    t->name = c->name;
    t->dtype_name = dt->name;
    t->usable = dt->usable;
    t->dtype = dt->dtype;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++)
        t->shape[i] = (int64_t)dims[i];
    t->nelem = (int64_t)nelem;
    /* begin <= end <= data_len <= file size, which fits size_t: mapped. */
    t->data = c->data + begin;
    t->nbytes = (size_t)need;
    return 0;
}

static int safetensors_parse_metadata(const char *path, const json_t *meta, struct error *err)
{
    if (!json_is_object(meta))
        return error_set(err, BG_EINVAL, "%s: __metadata__ must be an object of strings, not %s",
                         path, safetensors_json_type_name(meta));
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)meta, key, v) {
        if (!json_is_string(v)) {
            char shown[128];
            safetensors_show_name(shown, sizeof shown, key);
            return error_set(err, BG_EINVAL, "%s: __metadata__ \"%s\" must be a string, not %s",
                             path, shown, safetensors_json_type_name(v));
        }
    }
    return 0;
}

static int safetensors_cmp_by_offset(const void *a, const void *b)
{
    const struct st_tensor *x = a, *y = b;
    uintptr_t xa = (uintptr_t)x->data, ya = (uintptr_t)y->data;
    if (xa != ya)
        return xa < ya ? -1 : 1;
    if (x->nbytes != y->nbytes)
        return x->nbytes < y->nbytes ? -1 : 1;
    return strcmp(x->name, y->name);   /* names are unique: a total order */
}

static int safetensors_cmp_by_name(const void *a, const void *b)
{
    const struct st_tensor *const *x = a, *const *y = b;
    return strcmp((*x)->name, (*y)->name);
}

static int safetensors_name_to_tensor(const void *key, const void *elem)
{
    const struct st_tensor *const *t = elem;
    return strcmp(key, (*t)->name);
}

/* Tensors are sorted by offset: each non-empty one must start at or after
 * the furthest end seen so far. Empty tensors own no byte and cannot clash. */
static int safetensors_check_overlaps(struct safetensors *st, const unsigned char *data, struct error *err)
{
    const struct st_tensor *last = NULL;   /* the non-empty tensor reaching furthest */
    for (int i = 0; i < st->count; i++) {
        const struct st_tensor *t = &st->tensors[i];
        if (t->nbytes == 0)
            continue;
        const unsigned char *b = t->data;
        if (last && b < (const unsigned char *)last->data + last->nbytes) {
            char n1[128], n2[128];
            const unsigned char *lb = last->data;
            safetensors_show_name(n1, sizeof n1, last->name);
            safetensors_show_name(n2, sizeof n2, t->name);
            return error_set(err, BG_EINVAL,
                             "%s: tensors \"%s\" [%zu, %zu] and \"%s\" [%zu, %zu] overlap",
                             st->path, n1, (size_t)(lb - data), (size_t)(lb - data) + last->nbytes,
                             n2, (size_t)(b - data), (size_t)(b - data) + t->nbytes);
        }
        if (!last || b + t->nbytes > (const unsigned char *)last->data + last->nbytes)
            last = t;
    }
    return 0;
}

/* Everything after the file is mapped: header length, JSON, entries, layout. */
static int safetensors_parse_header(struct safetensors *st, struct error *err)
{
    const char *path = st->path;
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = (n << 8) | st->map[i];
    uint64_t after = (uint64_t)st->file_bytes - 8;
    if (n == 0)
        return error_set(err, BG_EINVAL, "%s: header length is 0", path);
    if (n > ST_MAX_HEADER_BYTES)
        return error_set(err, BG_EINVAL, "%s: header length %" PRIu64 " exceeds the %u-byte limit",
                         path, n, ST_MAX_HEADER_BYTES);
    if (n > after)
        return error_set(err, BG_EINVAL, "%s: header length %" PRIu64 " but only %" PRIu64
                         " bytes follow the length field (truncated file?)", path, n, after);

    json_error_t jerr;
    /* json_loadb takes a length: the header is not NUL-terminated in the file. */
    st->header = json_loadb((const char *)st->map + 8, (size_t)n, JSON_REJECT_DUPLICATES, &jerr);
    if (!st->header)
        return error_set(err, BG_EINVAL, "%s: header is not valid JSON: %s (at header byte %d)",
                         path, jerr.text, jerr.position);
    if (!json_is_object(st->header))
        return error_set(err, BG_EINVAL, "%s: header must be a JSON object, not %s", path,
                         safetensors_json_type_name(st->header));

    struct st_ctx c = {.path = path, .err = err, .data = st->map + 8 + n, .data_len = after - n};
    size_t entries = json_object_size(st->header);
    json_t *meta = json_object_get(st->header, "__metadata__");
    /* The reference implementation reads __metadata__ as optional: null is absent. */
    if (meta && !json_is_null(meta)) {
        int rc = safetensors_parse_metadata(path, meta, err);
        if (rc)
            return rc;
        st->metadata = meta;
    }
    if (meta)
        entries--;
    if (entries > INT_MAX)
        return error_set(err, BG_EINVAL, "%s: %zu tensors is too many", path, entries);

    st->tensors = calloc(entries ? entries : 1, sizeof *st->tensors);
    st->by_name = calloc(entries ? entries : 1, sizeof *st->by_name);
    if (!st->tensors || !st->by_name)
        return error_set(err, BG_ENOMEM, "%s: out of memory for %zu tensors", path, entries);

    const char *key;
    json_t *v;
    json_object_foreach(st->header, key, v) {
        if (strcmp(key, "__metadata__") == 0)
            continue;
        c.name = key;
        safetensors_show_name(c.shown, sizeof c.shown, key);
        int rc = safetensors_parse_tensor(&c, v, &st->tensors[st->count]);
        if (rc)
            return rc;
        st->count++;
    }

    qsort(st->tensors, (size_t)st->count, sizeof *st->tensors, safetensors_cmp_by_offset);
    int rc = safetensors_check_overlaps(st, c.data, err);
    if (rc)
        return rc;
    for (int i = 0; i < st->count; i++)
        st->by_name[i] = &st->tensors[i];
    qsort(st->by_name, (size_t)st->count, sizeof *st->by_name, safetensors_cmp_by_name);
    return 0;
}

/* The one way in for both entry points: bytes in memory, named for messages.
 * `owned` says whether the bytes are our mapping (unmapped at close). */
static int safetensors_open_bytes(const char *name, const unsigned char *bytes, size_t len, bool owned,
                      struct safetensors **out, struct error *err)
{
    *out = NULL;
    struct safetensors *st = calloc(1, sizeof *st);
    if (!st || !(st->path = strdup(name))) {
        free(st);
        if (owned && bytes)
            munmap((void *)bytes, len);
        return error_set(err, BG_ENOMEM, "%s: out of memory", name);
    }
    st->map = bytes;
    st->map_owned = owned;
    st->file_bytes = len;
    int rc;
    if (len < 8)
        rc = error_set(err, BG_EINVAL, "%s: file is %zu bytes, too short for the 8-byte header "
                       "length", name, len);
    else
        rc = safetensors_parse_header(st, err);
    if (rc) {
        safetensors_close(st);
        return rc;
    }
    *out = st;
    return 0;
}

int safetensors_open(const char *path, struct safetensors **out, struct error *err)
{
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return error_set(err, BG_EIO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    int rc = 0;
    void *map = NULL;
    size_t len = 0;
    if (fstat(fd, &sb) < 0)
        rc = error_set(err, BG_EIO, "%s: cannot stat: %s", path, strerror(errno));
    else if (!S_ISREG(sb.st_mode))
        rc = error_set(err, BG_EIO, "%s: not a regular file", path);
    else if ((uint64_t)sb.st_size > SIZE_MAX)
        rc = error_set(err, BG_EINVAL, "%s: file of %lld bytes cannot be mapped", path,
                       (long long)sb.st_size);
    else
        len = (size_t)sb.st_size;
    /* Shorter than the length field: safetensors_open_bytes refuses it without a
     * mapping (mmap of 0 bytes fails). MAP_PRIVATE + PROT_READ: we never
     * write, and nothing we do can reach the file. */
    if (rc == 0 && len >= 8) {
        /* MAP_POPULATE: every weight is read once at load anyway; mapping
         * the pages in one call costs a fraction of a fault per 4 KiB page
         * (a 100 MB model: 25,600 faults). */
        map = mmap(NULL, len, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
        if (map == MAP_FAILED) {
            map = NULL;
            rc = error_set(err, BG_EIO, "%s: cannot mmap %zu bytes: %s", path, len,
                           strerror(errno));
        }
    }
    close(fd);
    if (rc)
        return rc;
    return safetensors_open_bytes(path, map, len, map != NULL, out, err);
}

int safetensors_open_mem(const char *name, const void *data, size_t len,
                         struct safetensors **out, struct error *err)
{
    return safetensors_open_bytes(name, data, len, false, out, err);
}

void safetensors_close(struct safetensors *st)
{
    if (!st)
        return;
    if (st->map && st->map_owned)
        munmap((void *)st->map, st->file_bytes);
    json_decref(st->header);
    free(st->tensors);
    free(st->by_name);
    free(st->path);
    free(st);
}

int safetensors_count(const struct safetensors *st) { return st->count; }

const struct st_tensor *safetensors_at(const struct safetensors *st, int i)
{
    return i >= 0 && i < st->count ? &st->tensors[i] : NULL;
}

const struct st_tensor *safetensors_find(const struct safetensors *st, const char *name)
{
    const struct st_tensor *const *p =
        bsearch(name, st->by_name, (size_t)st->count, sizeof *st->by_name, safetensors_name_to_tensor);
    return p ? *p : NULL;
}

int safetensors_weight(const struct safetensors *st, const char *name,
                       const struct st_tensor **out, struct error *err)
{
    char shown[128];
    *out = NULL;
    const struct st_tensor *t = safetensors_find(st, name);
    safetensors_show_name(shown, sizeof shown, name);
    if (!t)
        return error_set(err, BG_EINVAL, "%s: no tensor \"%s\"", st->path, shown);
    if (!t->usable)
        return error_set(err, BG_EINVAL, "%s: tensor \"%s\" is %s; weights must be F32, F16 "
                         "or BF16", st->path, shown, t->dtype_name);
    *out = t;
    return 0;
}

const char *safetensors_metadata(const struct safetensors *st, const char *key)
{
    return st->metadata ? json_string_value(json_object_get(st->metadata, key)) : NULL;
}

const char *safetensors_path(const struct safetensors *st) { return st->path; }

size_t safetensors_file_bytes(const struct safetensors *st) { return st->file_bytes; }

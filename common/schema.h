/* schema.h - a JSON configuration described by tables, in the manner of
 * nginx's ngx_command_t.
 *
 * A section is an array of struct schema_field ended by SCHEMA_END: one row
 * per JSON key with its type, where it lives in the C struct (offsetof), its
 * range, its default and a line of documentation. The same rows
 *   - apply the defaults          (schema_defaults),
 *   - read and check a JSON object into the struct (schema_parse), with
 *     messages "FILE: proxy.routes[2].pipeline: must be an integer between
 *     1 and 16, got 40" and "did you mean" hints for unknown fields,
 *   - print the Markdown field table of docs/ (schema_doc),
 * so a field is described once and the three cannot disagree.
 *
 * Rows are written with the SCHEMA_F_* macros, which fill in the offset and
 * check at compile time that the member has the C type the row's type
 * writes, then designated initializers for the rest:
 *
 *     {SCHEMA_F_INT("pipeline", struct config_proxy_route, pipeline),
 *      .min = 1, .max = 16, .def = 1, .doc = "..."},
 */
#ifndef BG_SCHEMA_H
#define BG_SCHEMA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "common/error.h"

enum schema_type {
    SCHEMA_END,      /* ends a table (name NULL) */
    SCHEMA_BOOL,     /* bool */
    SCHEMA_INT,      /* int, min..max */
    SCHEMA_INT64,    /* int64_t, min..max */
    SCHEMA_SIZE,     /* size_t, min..max (a count of bytes) */
    SCHEMA_DOUBLE,   /* double, fmin..fmax; integers are accepted */
    SCHEMA_STRING,   /* char[size]; with `names`, one of them */
    SCHEMA_ENUM,     /* an int-sized enum: `names` maps the strings to values */
    SCHEMA_URLS,     /* "http://HOST:PORT" list: char hosts[max][size] at offset,
                        int ports[max] at offset2, int count at count_offset */
    SCHEMA_OBJECT,   /* a nested object: `fields` at base + offset, then `check` */
    SCHEMA_ARRAY,    /* min..max elements, each `item` at base + offset + i * size;
                        the count into count_offset unless SCHEMA_NO_COUNT */
    SCHEMA_IGNORE,   /* accepted and not stored */
    SCHEMA_CUSTOM,   /* `parse` does it all (the genuinely irregular ones) */
};

/* flags */
#define SCHEMA_REQUIRED  0x01u   /* absent is an error */
#define SCHEMA_NONEMPTY  0x02u   /* string: "" is an error */
#define SCHEMA_SLASH     0x04u   /* string: a URL path, starts with '/', no space or control
                                   * character (it goes into a request line as it is) */
#define SCHEMA_EXT       0x08u   /* docs: a batchgate addition to SPEC.md (inherited) */
#define SCHEMA_SEGMENT   0x10u   /* string: one URL path segment (a name sent in a request
                                   * line): no '/', '?', '#', space or control character */

/* count_offset of an array read into one struct, with no count kept. */
#define SCHEMA_NO_COUNT SIZE_MAX

/* One name of an enum or of a string's choices; a NULL name ends the list. */
struct schema_name {
    const char *name;
    int value;
};

/* Where parsing is: for messages. Callbacks may read it and pass it on. */
struct schema_ctx {
    const char *file;          /* names the file in messages */
    struct error *err;
    char path[256];            /* "proxy.routes[2].pipeline"; "" at the top */
    size_t len;
};

struct schema_field;
/* SCHEMA_CUSTOM: base is the struct the row's table describes; v is the
 * value, or NULL to apply the default (ctx NULL then: it cannot fail). */
typedef int schema_parse_fn(void *base, json_t *v, const struct schema_field *f,
                            struct schema_ctx *ctx);
/* An object's check once its fields are read: obj is the struct, json the
 * object as written (to tell "absent" from "default"), ctx->path its path. */
typedef int schema_check_fn(void *obj, json_t *json, struct schema_ctx *ctx);

struct schema_field {
    const char *name;              /* the JSON key; NULL for an array's item */
    enum schema_type type;
    unsigned flags;
    size_t offset;                 /* from the section's struct */
    size_t size;                   /* string: buffer; array: element stride; urls: host buffer */
    size_t offset2;                /* urls: the ports */
    size_t count_offset;           /* array, urls: the int count */
    int64_t min, max;              /* integers: range; array, urls: element count */
    double fmin, fmax;             /* double: range */
    int64_t def;                   /* bool, integers: default */
    double fdef;                   /* double: default */
    const char *sdef;              /* string, enum (a name), custom: default */
    const struct schema_name *names;       /* enum; string: its choices */
    const struct schema_field *fields;     /* object: its rows */
    const struct schema_field *item;       /* array: one row for every element */
    schema_check_fn *check;        /* object, or an array's object item */
    schema_parse_fn *parse;        /* custom */
    const char *expect;            /* custom: what it must be, for messages and docs */
    const char *hint;              /* why, appended to "must be" and "is not one of" messages */
    const char *doc;               /* one line for docs/ (Markdown) */
    const char *doc_default;       /* shown instead of the default ("stderr") */
};

/* ---- rows ---- */

/* offsetof(st, m), refusing to compile when m is not `size` bytes. */
#define SCHEMA_OFFSET_(st, m, size) \
    (offsetof(st, m) + 0 * sizeof(char[sizeof(((st *)0)->m) == (size) ? 1 : -1]))
#define SCHEMA_ELEMS_(st, m) (sizeof(((st *)0)->m) / sizeof(((st *)0)->m[0]))

#define SCHEMA_F_BOOL(nm, st, m) \
    .name = (nm), .type = SCHEMA_BOOL, .offset = SCHEMA_OFFSET_(st, m, sizeof(bool))
#define SCHEMA_F_INT(nm, st, m) \
    .name = (nm), .type = SCHEMA_INT, .offset = SCHEMA_OFFSET_(st, m, sizeof(int))
#define SCHEMA_F_INT64(nm, st, m) \
    .name = (nm), .type = SCHEMA_INT64, .offset = SCHEMA_OFFSET_(st, m, sizeof(int64_t))
#define SCHEMA_F_SIZE(nm, st, m) \
    .name = (nm), .type = SCHEMA_SIZE, .offset = SCHEMA_OFFSET_(st, m, sizeof(size_t))
#define SCHEMA_F_DOUBLE(nm, st, m) \
    .name = (nm), .type = SCHEMA_DOUBLE, .offset = SCHEMA_OFFSET_(st, m, sizeof(double))
#define SCHEMA_F_ENUM(nm, st, m, nms) \
    .name = (nm), .type = SCHEMA_ENUM, .offset = SCHEMA_OFFSET_(st, m, sizeof(int)), .names = (nms)
/* m is a char array; its size is the buffer's. */
#define SCHEMA_F_STRING(nm, st, m)                                                         \
    .name = (nm), .type = SCHEMA_STRING,                                                   \
    .offset = SCHEMA_OFFSET_(st, m[0], 1), .size = sizeof(((st *)0)->m)
/* hosts is char[N][cap], ports int[N], count an int. */
#define SCHEMA_F_URLS(nm, st, hosts, ports, count)                                         \
    .name = (nm), .type = SCHEMA_URLS, .offset = SCHEMA_OFFSET_(st, hosts[0][0], 1),       \
    .size = sizeof(((st *)0)->hosts[0]), .max = (int64_t)SCHEMA_ELEMS_(st, hosts),         \
    .offset2 = SCHEMA_OFFSET_(st, ports[0], sizeof(int)),                                  \
    .count_offset = SCHEMA_OFFSET_(st, count, sizeof(int))
/* m is a struct member holding the object's fields. */
#define SCHEMA_F_OBJECT(nm, st, m, flds) \
    .name = (nm), .type = SCHEMA_OBJECT, .offset = offsetof(st, m), .fields = (flds)
/* An object whose fields live in the enclosing struct itself. */
#define SCHEMA_F_SECTION(nm, flds) \
    .name = (nm), .type = SCHEMA_OBJECT, .offset = 0, .fields = (flds)
/* m is an array member; at most as many elements as it holds; count an int. */
#define SCHEMA_F_ARRAY(nm, st, m, count, itm)                                              \
    .name = (nm), .type = SCHEMA_ARRAY, .offset = offsetof(st, m),                         \
    .size = sizeof(((st *)0)->m[0]), .max = (int64_t)SCHEMA_ELEMS_(st, m),                 \
    .count_offset = SCHEMA_OFFSET_(st, count, sizeof(int)), .item = (itm)
/* A one-element array read into the single struct m (no count). */
#define SCHEMA_F_ONE(nm, st, m, itm)                                                       \
    .name = (nm), .type = SCHEMA_ARRAY, .offset = offsetof(st, m),                         \
    .size = sizeof(((st *)0)->m), .min = 1, .max = 1, .count_offset = SCHEMA_NO_COUNT,      \
    .item = (itm)
#define SCHEMA_F_CUSTOM(nm, fn) .name = (nm), .type = SCHEMA_CUSTOM, .parse = (fn)
#define SCHEMA_F_IGNORE(nm) .name = (nm), .type = SCHEMA_IGNORE
#define SCHEMA_END_ROW {.name = NULL, .type = SCHEMA_END}

/* ---- use ---- */

/* Sets every field of the table (and of its objects) to its default; arrays
 * to no elements. Other members of base are left alone. */
void schema_defaults(const struct schema_field *fields, void *base);

/* Reads the JSON object root into base over its current values: every key
 * must be a field of the table; every value is checked. Returns 0, or
 * -BG_ECONFIG with "FILE: FIELD PATH: what is wrong" in err. */
int schema_parse(const struct schema_field *fields, void *base, json_t *root, const char *file,
                 struct error *err);

/* JSON text into *out (the caller's reference; duplicate keys refused).
 * Returns 0, or -BG_ECONFIG with "NAME: line L, column C: invalid JSON: ...". */
int schema_json_parse(const char *data, size_t len, const char *name, json_t **out,
                      struct error *err);
/* The same from a file of at most max_bytes ("PATH: cannot open: ..."). */
int schema_json_read(const char *path, size_t max_bytes, json_t **out, struct error *err);

/* "FILE: PATH[.member]: <fmt>" into ctx->err; returns -BG_ECONFIG. member
 * may be NULL or "" (the path itself), or a key or "key[i].key" under it. */
int schema_fail(struct schema_ctx *ctx, const char *member, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* "FILE: PATH: must be <what f expects>, got <v> (<f's hint>)". */
int schema_fail_value(struct schema_ctx *ctx, const struct schema_field *f, json_t *v);

/* The Markdown table (field, values, default, meaning) of the table, nested
 * fields as "limits.max_body_bytes" and "proxy.routes[].pipeline". */
void schema_doc(FILE *out, const struct schema_field *fields);

/* Checks a table itself (a default in range, a doc on every row, names
 * unique, item strides that fit their type). Returns 0, or -1 with the first
 * problem in msg. For the tests: a bad row is a programming error. */
int schema_validate(const struct schema_field *fields, char *msg, size_t cap);

/* The closest of the n names to s when close enough to be a
 * likely typo ("max_conections" -> "max_connections"), else NULL. */
const char *schema_suggest(const char *s, const char *const *names, size_t n);

#endif

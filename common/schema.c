/* schema.c - see schema.h: the defaults and parse walks over the rows, and
 * the messages; schema_doc.c has the docs and the check of the rows. */
#include "common/schema.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "common/httpc.h"
#include "common/schema_impl.h"

#define SCHEMA_AT(base, off) ((void *)((char *)(base) + (off)))
/* Unknown-field hints compare against at most this many names. */
#define SCHEMA_MAX_NAMES 64

/* ---- names, paths, messages ---- */

const struct schema_name *schema_name_find(const struct schema_name *names, const char *s)
{
    for (const struct schema_name *n = names; n && n->name; n++)
        if (strcmp(n->name, s) == 0)
            return n;
    return NULL;
}

const char *schema_names_join(const struct schema_name *names, const char *quote, char *buf,
                              size_t cap)
{
    size_t len = 0;
    buf[0] = '\0';
    for (const struct schema_name *n = names; n && n->name && len < cap; n++) {
        int w = snprintf(buf + len, cap - len, "%s%s%s%s", n == names ? "" : ", ", quote, n->name,
                         quote);
        len += w > 0 ? (size_t)w : 0;
    }
    return buf;
}

/* Appends ".name" (or "name" at the top), or "[idx]" when name is NULL;
 * returns the length to restore with schema_path_pop. */
static size_t schema_path_push(struct schema_ctx *ctx, const char *name, size_t idx)
{
    size_t old = ctx->len, cap = sizeof ctx->path - old;
    int n = name ? snprintf(ctx->path + old, cap, "%s%s", old ? "." : "", name)
                 : snprintf(ctx->path + old, cap, "[%zu]", idx);
    ctx->len = n < 0 ? old : (size_t)n < cap ? old + (size_t)n : sizeof ctx->path - 1;
    return old;
}

static void schema_path_pop(struct schema_ctx *ctx, size_t old)
{
    ctx->len = old;
    ctx->path[old] = '\0';
}

int schema_fail(struct schema_ctx *ctx, const char *member, const char *fmt, ...)
{
    char what[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    if (!member)
        member = "";
    if (!ctx->len && !member[0])
        return error_set(ctx->err, BG_ECONFIG, "%s: %s", ctx->file, what);
    const char *dot = ctx->len && member[0] && member[0] != '[' ? "." : "";
    return error_set(ctx->err, BG_ECONFIG, "%s: %s%s%s: %s", ctx->file, ctx->path, dot, member,
                     what);
}

/* What the value found was, short enough for a message. */
static const char *schema_got(json_t *v, char *buf, size_t cap)
{
    switch (json_typeof(v)) {
    case JSON_STRING:
        if (json_string_length(v) > 40)
            snprintf(buf, cap, "\"%.40s...\"", json_string_value(v));
        else
            snprintf(buf, cap, "\"%s\"", json_string_value(v));
        break;
    case JSON_INTEGER: snprintf(buf, cap, "%lld", (long long)json_integer_value(v)); break;
    case JSON_REAL:
        /* 1.0 must not read as the integer 1 in "must be an integer, got 1" */
        snprintf(buf, cap, "%.17g", json_real_value(v));
        if (!strpbrk(buf, ".eEn"))
            snprintf(buf + strlen(buf), cap - strlen(buf), ".0");
        break;
    case JSON_TRUE: snprintf(buf, cap, "true"); break;
    case JSON_FALSE: snprintf(buf, cap, "false"); break;
    case JSON_NULL: snprintf(buf, cap, "null"); break;
    case JSON_OBJECT: snprintf(buf, cap, json_object_size(v) ? "an object" : "{}"); break;
    case JSON_ARRAY:
        if (json_array_size(v))
            snprintf(buf, cap, "an array of %zu", json_array_size(v));
        else
            snprintf(buf, cap, "[]");
        break;
    }
    return buf;
}

const char *schema_noun(const struct schema_field *f)
{
    static const char *const nouns[][2] = {
        {"value", "values"},   {"boolean", "booleans"}, {"integer", "integers"},
        {"number", "numbers"}, {"string", "strings"},   {"object", "objects"},
    };
    int k;
    switch (f->item->type) {
    case SCHEMA_BOOL: k = 1; break;
    case SCHEMA_INT: case SCHEMA_INT64: case SCHEMA_SIZE: k = 2; break;
    case SCHEMA_DOUBLE: k = 3; break;
    case SCHEMA_STRING: case SCHEMA_ENUM: k = 4; break;
    case SCHEMA_OBJECT: k = 5; break;
    default: k = 0; break;
    }
    return nouns[k][!(f->min == 1 && f->max == 1)];
}

/* "a list of at most 16" / "a list of 1 to 8" / "a list of exactly 1" */
static const char *schema_count_phrase(const struct schema_field *f, char *buf, size_t cap)
{
    if (f->min == f->max)
        snprintf(buf, cap, "a list of exactly %lld", (long long)f->max);
    else if (f->min == 0)
        snprintf(buf, cap, "a list of at most %lld", (long long)f->max);
    else
        snprintf(buf, cap, "a list of %lld to %lld", (long long)f->min, (long long)f->max);
    return buf;
}

/* What a value of f must be, as the end of "must be ...". */
static const char *schema_describe(const struct schema_field *f, char *buf, size_t cap)
{
    char tmp[200];
    if (f->expect)
        return f->expect;
    switch (f->type) {
    case SCHEMA_BOOL: return "true or false";
    case SCHEMA_INT: case SCHEMA_INT64: case SCHEMA_SIZE:
        snprintf(buf, cap, "an integer between %lld and %lld", (long long)f->min,
                 (long long)f->max);
        return buf;
    case SCHEMA_DOUBLE:
        snprintf(buf, cap, "a number between %g and %g", f->fmin, f->fmax);
        return buf;
    case SCHEMA_STRING:
        if (f->names) {
            snprintf(buf, cap, "one of %s", schema_names_join(f->names, "", tmp, sizeof tmp));
            return buf;
        }
        return f->flags & SCHEMA_SLASH      ? "a path starting with /"
               : f->flags & SCHEMA_NONEMPTY ? "a non-empty string"
                                            : "a string";
    case SCHEMA_ENUM:
        snprintf(buf, cap, "one of %s", schema_names_join(f->names, "", tmp, sizeof tmp));
        return buf;
    case SCHEMA_URLS:
        snprintf(buf, cap, "%s URLs like \"http://HOST:PORT\"",
                 schema_count_phrase(f, tmp, sizeof tmp));
        return buf;
    case SCHEMA_OBJECT: return "an object";
    case SCHEMA_ARRAY:
        snprintf(buf, cap, "%s %s", schema_count_phrase(f, tmp, sizeof tmp), schema_noun(f));
        return buf;
    default: return "something else";
    }
}

int schema_fail_value(struct schema_ctx *ctx, const struct schema_field *f, json_t *v)
{
    char want[300], got[64];
    return schema_fail(ctx, NULL, "must be %s, got %s%s%s%s", schema_describe(f, want, sizeof want),
                       schema_got(v, got, sizeof got), f->hint ? " (" : "",
                       f->hint ? f->hint : "", f->hint ? ")" : "");
}

/* ---- did you mean ---- */

/* Optimal string alignment distance (a swap of two neighbours costs 1). */
static size_t schema_distance(const char *a, const char *b)
{
    enum { N = 64 };
    size_t la = strlen(a), lb = strlen(b);
    if (la >= N || lb >= N)
        return SIZE_MAX;
    unsigned char d[N + 1][N + 1];   /* distances stay below N */
    for (size_t i = 0; i <= la; i++)
        d[i][0] = (unsigned char)i;
    for (size_t j = 0; j <= lb; j++)
        d[0][j] = (unsigned char)j;
    for (size_t i = 1; i <= la; i++) {
        for (size_t j = 1; j <= lb; j++) {
            size_t best = (size_t)d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            if ((size_t)d[i - 1][j] + 1 < best)
                best = (size_t)d[i - 1][j] + 1;
            if ((size_t)d[i][j - 1] + 1 < best)
                best = (size_t)d[i][j - 1] + 1;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
                (size_t)d[i - 2][j - 2] + 1 < best)
                best = (size_t)d[i - 2][j - 2] + 1;
            d[i][j] = (unsigned char)best;
        }
    }
    return d[la][lb];
}

const char *schema_suggest(const char *s, const char *const *names, size_t n)
{
    const char *best = NULL;
    size_t best_d = SIZE_MAX, ls = strlen(s);
    for (size_t i = 0; i < n; i++) {
        size_t lc = strlen(names[i]), longer = ls > lc ? ls : lc, shorter = ls < lc ? ls : lc;
        size_t d = schema_distance(s, names[i]);
        /* Close for its length, or one inside the other ("timeout" in "timeout_ms"). */
        bool close = (d != SIZE_MAX && d * 2 < longer) ||
                     (shorter >= 4 && (strstr(names[i], s) || strstr(s, names[i])));
        if (close && d < best_d) {
            best = names[i];
            best_d = d;
        }
    }
    return best;
}

static int schema_unknown_field(struct schema_ctx *ctx, const struct schema_field *fields,
                                const char *key)
{
    const char *names[SCHEMA_MAX_NAMES] = {0};
    size_t n = 0;
    for (const struct schema_field *f = fields; f->type != SCHEMA_END; f++)
        if (n < SCHEMA_MAX_NAMES)
            names[n++] = f->name;
    const char *hint = schema_suggest(key, names, n);
    if (hint)
        return schema_fail(ctx, key, "unknown field; did you mean \"%s\"?", hint);
    char list[300];
    size_t len = 0;
    list[0] = '\0';
    for (size_t i = 0; i < n && len < sizeof list; i++) {
        int w = snprintf(list + len, sizeof list - len, "%s%s", i ? ", " : "", names[i]);
        len += w > 0 ? (size_t)w : 0;
    }
    return schema_fail(ctx, key, "unknown field (known here: %s)", list);
}

/* "\"x\" is not one of a, b, c" and a hint when one is close. */
static int schema_not_a_name(struct schema_ctx *ctx, const struct schema_field *f, const char *s)
{
    const char *names[SCHEMA_MAX_NAMES] = {0};
    size_t n = 0;
    for (const struct schema_name *nm = f->names; nm->name && n < SCHEMA_MAX_NAMES; nm++)
        names[n++] = nm->name;
    const char *hint = schema_suggest(s, names, n);
    char list[300];
    schema_names_join(f->names, "", list, sizeof list);
    const char *why = f->hint ? f->hint : "";
    if (hint)
        return schema_fail(ctx, NULL, "\"%.40s\" is not one of %s; did you mean \"%s\"?%s%s%s",
                           s, list, hint, *why ? " (" : "", why, *why ? ")" : "");
    return schema_fail(ctx, NULL, "\"%.40s\" is not one of %s%s%s%s", s, list, *why ? " (" : "",
                       why, *why ? ")" : "");
}

/* ---- defaults ---- */

void schema_defaults(const struct schema_field *fields, void *base)
{
    for (const struct schema_field *f = fields; f->type != SCHEMA_END; f++) {
        void *p = SCHEMA_AT(base, f->offset);
        const struct schema_name *nm;
        switch (f->type) {
        case SCHEMA_BOOL: *(bool *)p = f->def != 0; break;
        case SCHEMA_INT: *(int *)p = (int)f->def; break;
        case SCHEMA_INT64: *(int64_t *)p = f->def; break;
        case SCHEMA_SIZE: *(size_t *)p = (size_t)f->def; break;
        case SCHEMA_DOUBLE: *(double *)p = f->fdef; break;
        case SCHEMA_STRING: snprintf(p, f->size, "%s", f->sdef ? f->sdef : ""); break;
        case SCHEMA_ENUM:
            nm = f->sdef ? schema_name_find(f->names, f->sdef) : f->names;
            *(int *)p = nm ? nm->value : 0;
            break;
        case SCHEMA_URLS: *(int *)SCHEMA_AT(base, f->count_offset) = 0; break;
        case SCHEMA_OBJECT: schema_defaults(f->fields, p); break;
        case SCHEMA_ARRAY:
            if (f->count_offset != SCHEMA_NO_COUNT) {
                *(int *)SCHEMA_AT(base, f->count_offset) = 0;
            } else {
                memset(p, 0, f->size);
                if (f->item->type == SCHEMA_OBJECT)
                    schema_defaults(f->item->fields, SCHEMA_AT(p, f->item->offset));
            }
            break;
        case SCHEMA_CUSTOM: f->parse(base, NULL, f, NULL); break;
        case SCHEMA_END: case SCHEMA_IGNORE: break;
        }
    }
}

/* ---- parse ---- */

static int schema_parse_value(const struct schema_field *f, void *base, json_t *v,
                              struct schema_ctx *ctx);

static int schema_parse_object(const struct schema_field *self, const struct schema_field *fields,
                               schema_check_fn *check, void *base, json_t *obj,
                               struct schema_ctx *ctx)
{
    if (!json_is_object(obj))
        return self ? schema_fail_value(ctx, self, obj)
                    : schema_fail(ctx, NULL, "the top level must be a JSON object");
    const char *key;
    json_t *v;
    json_object_foreach(obj, key, v) {
        const struct schema_field *f = fields;
        while (f->type != SCHEMA_END && strcmp(f->name, key) != 0)
            f++;
        if (f->type == SCHEMA_END)
            return schema_unknown_field(ctx, fields, key);
    }
    for (const struct schema_field *f = fields; f->type != SCHEMA_END; f++) {
        char want[300];
        if (!(v = json_object_get(obj, f->name))) {
            if (f->flags & SCHEMA_REQUIRED)
                return schema_fail(ctx, f->name, "missing (must be %s)",
                                   schema_describe(f, want, sizeof want));
            continue;
        }
        size_t old = schema_path_push(ctx, f->name, 0);
        int rc = schema_parse_value(f, base, v, ctx);
        if (rc)
            return rc;
        schema_path_pop(ctx, old);
    }
    return check ? check(base, obj, ctx) : 0;
}

static int schema_parse_array(const struct schema_field *f, void *base, json_t *v,
                              struct schema_ctx *ctx)
{
    if (!json_is_array(v) || (int64_t)json_array_size(v) < f->min ||
        (int64_t)json_array_size(v) > f->max)
        return schema_fail_value(ctx, f, v);
    const struct schema_field *it = f->item;
    size_t i;
    json_t *e;
    json_array_foreach(v, i, e) {
        void *elem = SCHEMA_AT(base, f->offset + i * f->size);
        size_t old = schema_path_push(ctx, NULL, i);
        int rc;
        if (it->type == SCHEMA_OBJECT) {
            /* Each element starts from its defaults, whatever was there before. */
            memset(elem, 0, f->size);
            schema_defaults(it->fields, SCHEMA_AT(elem, it->offset));
            rc = schema_parse_object(it, it->fields, it->check, SCHEMA_AT(elem, it->offset), e,
                                     ctx);
        } else {
            rc = schema_parse_value(it, elem, e, ctx);
        }
        if (rc)
            return rc;
        schema_path_pop(ctx, old);
    }
    if (f->count_offset != SCHEMA_NO_COUNT)
        *(int *)SCHEMA_AT(base, f->count_offset) = (int)json_array_size(v);
    return 0;
}

/* One parser of upstream URL lists for every section that has one. */
static int schema_parse_urls(const struct schema_field *f, void *base, json_t *v,
                             struct schema_ctx *ctx)
{
    if (!json_is_array(v) || (int64_t)json_array_size(v) < f->min ||
        (int64_t)json_array_size(v) > f->max)
        return schema_fail_value(ctx, f, v);
    size_t i;
    json_t *u;
    json_array_foreach(v, i, u) {
        char *host = SCHEMA_AT(base, f->offset + i * f->size);
        int *port = SCHEMA_AT(base, f->offset2 + i * sizeof(int));
        const char *rest = NULL;
        if (!json_is_string(u) ||
            httpc_url_parse(json_string_value(u), host, f->size, port, &rest) < 0 ||
            (rest && strcmp(rest, "/") != 0)) {
            char member[32], got[64];
            snprintf(member, sizeof member, "[%zu]", i);
            return schema_fail(ctx, member, "must be a URL like \"http://HOST:PORT\" "
                               "(\"http://[IPV6]:PORT\"), got %s", schema_got(u, got, sizeof got));
        }
        /* One server named twice is two of everything labelled by its URL
         * (/metrics then carries duplicate series, which Prometheus
         * refuses whole). */
        for (size_t k = 0; k < i; k++)
            if (*(int *)SCHEMA_AT(base, f->offset2 + k * sizeof(int)) == *port &&
                strcasecmp(SCHEMA_AT(base, f->offset + k * f->size), host) == 0) {
                char member[32];
                snprintf(member, sizeof member, "[%zu]", i);
                return schema_fail(ctx, member, "names the same server as [%zu] (%s:%d): list "
                                   "each once", k, host, *port);
            }
    }
    *(int *)SCHEMA_AT(base, f->count_offset) = (int)json_array_size(v);
    return 0;
}

static int schema_parse_string(const struct schema_field *f, void *p, json_t *v,
                               struct schema_ctx *ctx)
{
    if (!json_is_string(v))
        return schema_fail_value(ctx, f, v);
    const char *s = json_string_value(v);
    size_t n = json_string_length(v);
    if (f->names && !schema_name_find(f->names, s))
        return schema_not_a_name(ctx, f, s);
    if (n == 0 && (f->flags & SCHEMA_NONEMPTY) && !(f->flags & SCHEMA_SLASH))
        return schema_fail_value(ctx, f, v);
    if ((f->flags & SCHEMA_SLASH) && s[0] != '/')
        return schema_fail(ctx, NULL, "\"%.40s\" must start with /", s);
    /* Written into request lines as they are: a CR LF in one made every
     * probe (or call) carry a header, or a second request, of its own. */
    for (size_t i = 0; i < n && (f->flags & (SCHEMA_SLASH | SCHEMA_SEGMENT)); i++) {
        unsigned char c = (unsigned char)s[i];
        if (c <= 0x20 || c == 0x7f ||
            ((f->flags & SCHEMA_SEGMENT) && (c == '/' || c == '?' || c == '#')))
            return schema_fail(ctx, NULL, "byte %zu of \"%.40s\" (0x%02x) may not be in %s", i,
                               s, c, f->flags & SCHEMA_SEGMENT ? "a name in a URL path"
                                                               : "a URL path");
    }
    if (n >= f->size || strlen(s) != n)
        return schema_fail(ctx, NULL, "must be a string of at most %zu bytes, got %zu bytes",
                           f->size - 1, n);
    memcpy(p, s, n + 1);
    return 0;
}

static int schema_parse_value(const struct schema_field *f, void *base, json_t *v,
                              struct schema_ctx *ctx)
{
    void *p = SCHEMA_AT(base, f->offset);
    const struct schema_name *nm;
    switch (f->type) {
    case SCHEMA_BOOL:
        if (!json_is_boolean(v))
            return schema_fail_value(ctx, f, v);
        *(bool *)p = json_is_true(v);
        return 0;
    case SCHEMA_INT: case SCHEMA_INT64: case SCHEMA_SIZE: {
        if (!json_is_integer(v) || json_integer_value(v) < f->min ||
            json_integer_value(v) > f->max)
            return schema_fail_value(ctx, f, v);
        long long x = json_integer_value(v);
        if (f->type == SCHEMA_INT)
            *(int *)p = (int)x;
        else if (f->type == SCHEMA_INT64)
            *(int64_t *)p = x;
        else
            *(size_t *)p = (size_t)x;
        return 0;
    }
    case SCHEMA_DOUBLE:
        if (!json_is_number(v) || json_number_value(v) < f->fmin || json_number_value(v) > f->fmax)
            return schema_fail_value(ctx, f, v);
        *(double *)p = json_number_value(v);
        return 0;
    case SCHEMA_STRING: return schema_parse_string(f, p, v, ctx);
    case SCHEMA_ENUM:
        if (!json_is_string(v))
            return schema_fail_value(ctx, f, v);
        if (!(nm = schema_name_find(f->names, json_string_value(v))))
            return schema_not_a_name(ctx, f, json_string_value(v));
        *(int *)p = nm->value;
        return 0;
    case SCHEMA_URLS: return schema_parse_urls(f, base, v, ctx);
    case SCHEMA_OBJECT: return schema_parse_object(f, f->fields, f->check, p, v, ctx);
    case SCHEMA_ARRAY: return schema_parse_array(f, base, v, ctx);
    case SCHEMA_CUSTOM: return f->parse(base, v, f, ctx);
    case SCHEMA_IGNORE: case SCHEMA_END: return 0;
    }
    return 0;
}

int schema_parse(const struct schema_field *fields, void *base, json_t *root, const char *file,
                 struct error *err)
{
    struct schema_ctx ctx = {.file = file, .err = err};
    return schema_parse_object(NULL, fields, NULL, base, root, &ctx);
}

/* ---- JSON text ---- */

int schema_json_parse(const char *data, size_t len, const char *name, json_t **out,
                      struct error *err)
{
    json_error_t jerr;
    if (!(*out = json_loadb(data, len, JSON_REJECT_DUPLICATES, &jerr)))
        return error_set(err, BG_ECONFIG, "%s: line %d, column %d: invalid JSON: %s", name,
                         jerr.line, jerr.column, jerr.text);
    return 0;
}

int schema_json_read(const char *path, size_t max_bytes, json_t **out, struct error *err)
{
    *out = NULL;
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        int e = errno;
        /* A symbolic link to nothing said "No such file" of a file that
         * `ls` shows: the target is named. */
        char target[1024];
        ssize_t tn = e == ENOENT ? readlink(path, target, sizeof target - 1) : -1;
        if (tn >= 0) {
            target[tn] = '\0';
            return error_set(err, BG_ECONFIG, "%s: cannot open: a symbolic link to %s, which "
                             "does not exist", path, target);
        }
        return error_set(err, BG_ECONFIG, "%s: cannot open: %s", path, strerror(e));
    }
    char *buf = NULL;
    size_t len = 0, cap = 0;
    int rc = 0;
    while (rc == 0) {
        if (len == cap) {
            size_t ncap = cap ? cap * 2 : 4096;
            char *n = cap > max_bytes ? NULL : realloc(buf, ncap);
            if (!n) {
                rc = cap > max_bytes ? error_set(err, BG_ECONFIG, "%s: larger than %zu bytes",
                                                 path, max_bytes)
                                     : error_set(err, BG_ENOMEM, "%s: out of memory", path);
                break;
            }
            buf = n;
            cap = ncap;
        }
        size_t r = fread(buf + len, 1, cap - len, fp);
        len += r;
        if (r == 0 && ferror(fp))
            rc = error_set(err, BG_ECONFIG, "%s: cannot read: %s", path, strerror(errno));
        else if (r == 0)
            break;
    }
    if (rc == 0 && len > max_bytes)
        rc = error_set(err, BG_ECONFIG, "%s: larger than %zu bytes", path, max_bytes);
    fclose(fp);
    if (rc == 0)
        rc = schema_json_parse(buf, len, path, out, err);
    free(buf);
    return rc;
}

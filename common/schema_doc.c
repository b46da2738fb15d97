/* schema_doc.c - see schema.h: the docs walk over the rows (Markdown field
 * tables) and the check of the rows themselves. */
#include "common/schema.h"

#include <limits.h>
#include <string.h>

#include "common/schema_impl.h"

/* ---- docs ---- */

static const char *schema_doc_values(const struct schema_field *f, char *buf, size_t cap)
{
    char tmp[200], cnt[64], cnt2[160];
    if (f->expect && f->type == SCHEMA_CUSTOM)
        return f->expect;
    switch (f->type) {
    case SCHEMA_BOOL: return "boolean";
    case SCHEMA_INT: case SCHEMA_INT64: case SCHEMA_SIZE:
        snprintf(buf, cap, "integer %lld..%lld", (long long)f->min, (long long)f->max);
        return buf;
    case SCHEMA_DOUBLE: snprintf(buf, cap, "number %g..%g", f->fmin, f->fmax); return buf;
    case SCHEMA_STRING:
        if (f->names)
            return schema_names_join(f->names, "`", buf, cap);
        return f->flags & SCHEMA_SLASH      ? "path (`/...`)"
               : f->flags & SCHEMA_NONEMPTY ? "non-empty string"
                                            : "string";
    case SCHEMA_ENUM: return schema_names_join(f->names, "`", buf, cap);
    case SCHEMA_URLS:
        snprintf(buf, cap, "%lld..%lld URLs `http://HOST:PORT` (`http://[IPV6]:PORT`)",
                 (long long)f->min, (long long)f->max);
        return buf;
    case SCHEMA_ARRAY:
        if (f->min == f->max)
            snprintf(cnt, sizeof cnt, "%lld", (long long)f->max);
        else
            snprintf(cnt, sizeof cnt, "%lld..%lld", (long long)f->min, (long long)f->max);
        if (f->item->type == SCHEMA_INT || f->item->type == SCHEMA_INT64 ||
            f->item->type == SCHEMA_SIZE)
            snprintf(tmp, sizeof tmp, " %lld..%lld", (long long)f->item->min,
                     (long long)f->item->max);
        else if (f->item->type == SCHEMA_DOUBLE)
            snprintf(tmp, sizeof tmp, " %g..%g", f->item->fmin, f->item->fmax);
        else if (f->item->type == SCHEMA_ENUM || f->item->names)
            snprintf(tmp, sizeof tmp, " of %s", schema_doc_values(f->item, cnt2, sizeof cnt2));
        else
            tmp[0] = '\0';
        snprintf(buf, cap, "list of %s %s%s", cnt, schema_noun(f), tmp);
        return buf;
    case SCHEMA_IGNORE: return f->expect ? f->expect : "anything (ignored)";
    default: return "";
    }
}

static const char *schema_doc_default(const struct schema_field *f, char *buf, size_t cap)
{
    if (f->doc_default)
        return f->doc_default;
    if (f->flags & SCHEMA_REQUIRED)
        return "required";
    switch (f->type) {
    case SCHEMA_BOOL: return f->def ? "`true`" : "`false`";
    case SCHEMA_INT: case SCHEMA_INT64: case SCHEMA_SIZE:
        snprintf(buf, cap, "`%lld`", (long long)f->def);
        return buf;
    case SCHEMA_DOUBLE: snprintf(buf, cap, "`%g`", f->fdef); return buf;
    case SCHEMA_STRING: case SCHEMA_CUSTOM:
        snprintf(buf, cap, "`\"%s\"`", f->sdef ? f->sdef : "");
        return buf;
    case SCHEMA_ENUM:
        snprintf(buf, cap, "`\"%s\"`", f->sdef ? f->sdef : f->names[0].name);
        return buf;
    case SCHEMA_URLS: case SCHEMA_ARRAY: return "`[]`";
    default: return "";
    }
}

static void schema_doc_rows(FILE *out, const struct schema_field *fields, const char *prefix,
                            bool ext)
{
    for (const struct schema_field *f = fields; f->type != SCHEMA_END; f++) {
        char path[256], values[300], def[300];
        bool x = ext || (f->flags & SCHEMA_EXT);
        snprintf(path, sizeof path, "%s%s%s", prefix, prefix[0] ? "." : "", f->name);
        if (f->type == SCHEMA_OBJECT) {
            schema_doc_rows(out, f->fields, path, x);
            continue;
        }
        fprintf(out, "| `%s`%s | %s | %s | %s |\n", path, x ? " *(ext)*" : "",
                schema_doc_values(f, values, sizeof values),
                schema_doc_default(f, def, sizeof def), f->doc);
        if (f->type == SCHEMA_ARRAY && f->item->type == SCHEMA_OBJECT) {
            snprintf(path + strlen(path), sizeof path - strlen(path), "[]");
            schema_doc_rows(out, f->item->fields, path, x);
        }
    }
}

void schema_doc(FILE *out, const struct schema_field *fields)
{
    fprintf(out, "| field | values | default | meaning |\n| --- | --- | --- | --- |\n");
    schema_doc_rows(out, fields, "", false);
}

/* ---- the rows themselves ---- */

static size_t schema_type_size(enum schema_type t)
{
    switch (t) {
    case SCHEMA_BOOL: return sizeof(bool);
    case SCHEMA_INT: case SCHEMA_ENUM: return sizeof(int);
    case SCHEMA_INT64: return sizeof(int64_t);
    case SCHEMA_SIZE: return sizeof(size_t);
    case SCHEMA_DOUBLE: return sizeof(double);
    default: return 0;
    }
}

static int schema_validate_row(const struct schema_field *f, bool item, char *msg, size_t cap)
{
    const char *name = f->name ? f->name : "(item)";
#define SCHEMA_BAD(...) do { snprintf(msg, cap, __VA_ARGS__); return -1; } while (0)
    if (!item && (!f->name || !f->doc || !f->doc[0]))
        SCHEMA_BAD("%s: a row needs a name and a doc", name);
    switch (f->type) {
    case SCHEMA_INT:
        if (f->min < INT_MIN || f->max > INT_MAX)
            SCHEMA_BAD("%s: range beyond an int", name);
        /* fallthrough */
    case SCHEMA_INT64: case SCHEMA_SIZE:
        if (f->min > f->max || (!item && (f->def < f->min || f->def > f->max)) ||
            (f->type == SCHEMA_SIZE && f->min < 0))
            SCHEMA_BAD("%s: default %lld outside %lld..%lld", name, (long long)f->def,
                       (long long)f->min, (long long)f->max);
        break;
    case SCHEMA_DOUBLE:
        if (!(f->fmin <= f->fdef && f->fdef <= f->fmax))
            SCHEMA_BAD("%s: default %g outside %g..%g", name, f->fdef, f->fmin, f->fmax);
        break;
    case SCHEMA_STRING:
        if (!f->size || (f->sdef && strlen(f->sdef) >= f->size) ||
            (f->names && f->sdef && !schema_name_find(f->names, f->sdef)))
            SCHEMA_BAD("%s: default does not fit its buffer or choices", name);
        break;
    case SCHEMA_ENUM:
        if (!f->names || !f->names[0].name || (f->sdef && !schema_name_find(f->names, f->sdef)))
            SCHEMA_BAD("%s: an enum needs names that include its default", name);
        break;
    case SCHEMA_URLS:
        if (!f->size || f->max < 1 || f->min > f->max)
            SCHEMA_BAD("%s: bad URL list bounds", name);
        break;
    case SCHEMA_OBJECT:
        if (!f->fields)
            SCHEMA_BAD("%s: an object needs fields", name);
        return schema_validate(f->fields, msg, cap);
    case SCHEMA_ARRAY:
        if (!f->item || f->max < 1 || f->min < 0 || f->min > f->max)
            SCHEMA_BAD("%s: an array needs an item and bounds", name);
        if (f->item->type != SCHEMA_OBJECT && f->item->type != SCHEMA_STRING &&
            schema_type_size(f->item->type) != f->size)
            SCHEMA_BAD("%s: item of %zu bytes, elements of %zu", name,
                       schema_type_size(f->item->type), f->size);
        if (f->item->type == SCHEMA_STRING && f->item->size != f->size)
            SCHEMA_BAD("%s: string item buffer differs from the stride", name);
        return schema_validate_row(f->item, true, msg, cap);
    case SCHEMA_CUSTOM:
        if (!f->parse || !f->expect)
            SCHEMA_BAD("%s: a custom row needs parse and expect", name);
        break;
    default: break;
    }
    return 0;
#undef SCHEMA_BAD
}

int schema_validate(const struct schema_field *fields, char *msg, size_t cap)
{
    for (const struct schema_field *f = fields; f->type != SCHEMA_END; f++) {
        if (schema_validate_row(f, false, msg, cap))
            return -1;
        for (const struct schema_field *g = fields; g < f; g++)
            if (strcmp(g->name, f->name) == 0) {
                snprintf(msg, cap, "%s: appears twice", f->name);
                return -1;
            }
    }
    return 0;
}

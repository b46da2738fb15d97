/* pbjson.c - see pbjson.h. */
#include "gateway/pbjson.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- the arena ---- */

struct pbjson_block {
    struct pbjson_block *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
};

struct pbjson_arena {
    struct pbjson_block *head;
};

#define PBJSON_BLOCK (16u << 10)

struct pbjson_arena *pbjson_arena_new(void) { return calloc(1, sizeof(struct pbjson_arena)); }

void pbjson_arena_free(struct pbjson_arena *a)
{
    if (!a)
        return;
    for (struct pbjson_block *b = a->head, *next; b; b = next) {
        next = b->next;
        free(b);
    }
    free(a);
}

void *pbjson_alloc(struct pbjson_arena *a, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    struct pbjson_block *b = a->head;
    if (!b || b->cap - b->used < n) {
        size_t cap = n > PBJSON_BLOCK ? n : PBJSON_BLOCK;
        b = malloc(sizeof *b + cap);
        if (!b)
            return NULL;
        b->used = 0;
        b->cap = cap;
        b->next = a->head;
        a->head = b;
    }
    void *p = b->data + b->used;
    b->used += n;
    memset(p, 0, n);
    return p;
}

char *pbjson_strndup(struct pbjson_arena *a, const char *s, size_t n)
{
    char *p = pbjson_alloc(a, n + 1);
    if (p)
        memcpy(p, s, n);
    return p;
}

/* ---- fields ---- */

static size_t pbjson_elem_size(ProtobufCType t)
{
    switch (t) {
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64:
    case PROTOBUF_C_TYPE_DOUBLE: return 8;
    case PROTOBUF_C_TYPE_BOOL: return sizeof(protobuf_c_boolean);
    case PROTOBUF_C_TYPE_STRING:
    case PROTOBUF_C_TYPE_MESSAGE: return sizeof(void *);
    case PROTOBUF_C_TYPE_BYTES: return sizeof(ProtobufCBinaryData);
    default: return 4;   /* the 32-bit integers, float, enum */
    }
}

static bool pbjson_integer(json_t *v, int64_t *out)
{
    if (json_is_integer(v)) {
        *out = json_integer_value(v);
        return true;
    }
    if (json_is_real(v)) {
        double d = json_real_value(v);
        if (d >= -9.2e18 && d <= 9.2e18 && d == (double)(int64_t)d) {
            *out = (int64_t)d;
            return true;
        }
    }
    return false;
}

/* Whether one of m's oneof members is set. */
static bool pbjson_oneof_set(const ProtobufCMessage *m)
{
    const ProtobufCMessageDescriptor *d = m->descriptor;
    for (unsigned i = 0; i < d->n_fields; i++)
        if ((d->fields[i].flags & PROTOBUF_C_FIELD_FLAG_ONEOF) &&
            *(const uint32_t *)((const char *)m + d->fields[i].quantifier_offset) ==
                d->fields[i].id)
            return true;
    return false;
}

/* One value of field f into dst; false: skipped (wrong type) or no memory. */
static bool pbjson_value(const ProtobufCFieldDescriptor *f, void *dst, json_t *v,
                         struct pbjson_arena *a)
{
    int64_t i;
    switch (f->type) {
    case PROTOBUF_C_TYPE_INT32:
    case PROTOBUF_C_TYPE_SINT32:
    case PROTOBUF_C_TYPE_SFIXED32:
        if (!pbjson_integer(v, &i) || i < INT32_MIN || i > INT32_MAX)
            return false;
        *(int32_t *)dst = (int32_t)i;
        return true;
    case PROTOBUF_C_TYPE_UINT32:
    case PROTOBUF_C_TYPE_FIXED32:
        if (!pbjson_integer(v, &i) || i < 0 || i > UINT32_MAX)
            return false;
        *(uint32_t *)dst = (uint32_t)i;
        return true;
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
        if (!pbjson_integer(v, &i))
            return false;
        *(int64_t *)dst = i;
        return true;
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64:
        if (!pbjson_integer(v, &i) || i < 0)
            return false;
        *(uint64_t *)dst = (uint64_t)i;
        return true;
    case PROTOBUF_C_TYPE_FLOAT:
        if (!json_is_number(v))
            return false;
        *(float *)dst = (float)json_number_value(v);
        return true;
    case PROTOBUF_C_TYPE_DOUBLE:
        if (!json_is_number(v))
            return false;
        *(double *)dst = json_number_value(v);
        return true;
    case PROTOBUF_C_TYPE_BOOL:
        if (!json_is_boolean(v))
            return false;
        *(protobuf_c_boolean *)dst = json_is_true(v);
        return true;
    case PROTOBUF_C_TYPE_ENUM: {
        const ProtobufCEnumValue *ev = NULL;
        if (json_is_string(v))
            ev = protobuf_c_enum_descriptor_get_value_by_name(f->descriptor, json_string_value(v));
        else if (pbjson_integer(v, &i) && i >= INT32_MIN && i <= INT32_MAX)
            ev = protobuf_c_enum_descriptor_get_value(f->descriptor, (int)i);
        if (!ev)
            return false;
        *(int *)dst = ev->value;
        return true;
    }
    case PROTOBUF_C_TYPE_STRING: {
        if (!json_is_string(v))
            return false;
        char *s = pbjson_strndup(a, json_string_value(v), json_string_length(v));
        *(char **)dst = s;
        return s != NULL;
    }
    case PROTOBUF_C_TYPE_BYTES: {
        if (!json_is_string(v))
            return false;
        ProtobufCBinaryData *b = dst;
        b->len = json_string_length(v);
        b->data = (uint8_t *)pbjson_strndup(a, json_string_value(v), b->len);
        return b->data != NULL;
    }
    case PROTOBUF_C_TYPE_MESSAGE: {
        /* An object, or a scalar that set a oneof-only message's member;
         * anything else (null, an array, a scalar no member takes) is of
         * the wrong type: skipped, not an empty message. */
        ProtobufCMessage *m = pbjson_message(f->descriptor, v, a);
        if (!m || (!json_is_object(v) && !pbjson_oneof_set(m)))
            return false;
        *(ProtobufCMessage **)dst = m;
        return true;
    }
    }
    return false;
}

/* A map field: its entry message has fields key (1) and value (2). */
static bool pbjson_is_map(const ProtobufCFieldDescriptor *f)
{
    if (f->type != PROTOBUF_C_TYPE_MESSAGE || f->label != PROTOBUF_C_LABEL_REPEATED)
        return false;
    const ProtobufCMessageDescriptor *e = f->descriptor;
    return e->n_fields == 2 && strcmp(e->fields[0].name, "key") == 0 &&
           strcmp(e->fields[1].name, "value") == 0;
}

static void pbjson_repeated(ProtobufCMessage *m, const ProtobufCFieldDescriptor *f, json_t *v,
                            struct pbjson_arena *a)
{
    size_t *n = (size_t *)((char *)m + f->quantifier_offset);
    void **arr = (void **)((char *)m + f->offset);
    size_t es = pbjson_elem_size(f->type);
    if (pbjson_is_map(f) && json_is_object(v)) {
        const ProtobufCMessageDescriptor *ed = f->descriptor;
        ProtobufCMessage **out = pbjson_alloc(a, (json_object_size(v) + 1) * sizeof *out);
        if (!out)
            return;
        size_t k = 0;
        const char *key;
        json_t *val;
        json_object_foreach(v, key, val) {
            ProtobufCMessage *e = pbjson_alloc(a, ed->sizeof_message);
            if (!e)
                return;
            protobuf_c_message_init(ed, e);
            json_t *jk = json_string(key);
            bool ok = jk && pbjson_value(&ed->fields[0], (char *)e + ed->fields[0].offset, jk, a) &&
                      pbjson_value(&ed->fields[1], (char *)e + ed->fields[1].offset, val, a);
            json_decref(jk);
            if (ok)
                out[k++] = e;
        }
        *n = k;
        *arr = out;
        return;
    }
    if (!json_is_array(v))
        return;
    size_t len = json_array_size(v);
    char *out = pbjson_alloc(a, (len + 1) * es);
    if (!out)
        return;
    size_t k = 0;
    for (size_t i = 0; i < len; i++)
        if (pbjson_value(f, out + k * es, json_array_get(v, i), a))
            k++;
    *n = k;
    *arr = out;
}

/* A message whose every field is a member of one oneof. */
static bool pbjson_oneof_only(const ProtobufCMessageDescriptor *d)
{
    if (d->n_fields == 0)
        return false;
    for (unsigned i = 0; i < d->n_fields; i++)
        if (!(d->fields[i].flags & PROTOBUF_C_FIELD_FLAG_ONEOF))
            return false;
    return true;
}

static void pbjson_set(ProtobufCMessage *m, const ProtobufCFieldDescriptor *f, json_t *v,
                       struct pbjson_arena *a)
{
    if (f->label == PROTOBUF_C_LABEL_REPEATED) {
        pbjson_repeated(m, f, v, a);
        return;
    }
    if (!pbjson_value(f, (char *)m + f->offset, v, a))
        return;
    if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF)
        *(uint32_t *)((char *)m + f->quantifier_offset) = f->id;
    else if (f->label == PROTOBUF_C_LABEL_OPTIONAL && f->type != PROTOBUF_C_TYPE_MESSAGE &&
             f->type != PROTOBUF_C_TYPE_STRING)
        *(protobuf_c_boolean *)((char *)m + f->quantifier_offset) = 1;
}

/* A scalar for a oneof-only message: the member of its JSON type. */
static void pbjson_scalar_oneof(ProtobufCMessage *m, const ProtobufCMessageDescriptor *d, json_t *v,
                                struct pbjson_arena *a)
{
    static const ProtobufCType by_bool[] = {PROTOBUF_C_TYPE_BOOL};
    static const ProtobufCType by_int[] = {PROTOBUF_C_TYPE_INT64, PROTOBUF_C_TYPE_UINT32,
                                           PROTOBUF_C_TYPE_UINT64, PROTOBUF_C_TYPE_INT32,
                                           PROTOBUF_C_TYPE_DOUBLE};
    static const ProtobufCType by_real[] = {PROTOBUF_C_TYPE_DOUBLE, PROTOBUF_C_TYPE_FLOAT};
    static const ProtobufCType by_string[] = {PROTOBUF_C_TYPE_STRING};
    const ProtobufCType *want;
    size_t nwant;
    if (json_is_boolean(v)) {
        want = by_bool;
        nwant = 1;
    } else if (json_is_integer(v)) {
        want = by_int;
        nwant = sizeof by_int / sizeof by_int[0];
    } else if (json_is_real(v)) {
        want = by_real;
        nwant = 2;
    } else if (json_is_string(v)) {
        want = by_string;
        nwant = 1;
    } else {
        return;
    }
    for (size_t w = 0; w < nwant; w++)
        for (unsigned i = 0; i < d->n_fields; i++)
            if (d->fields[i].type == want[w] &&
                (want[w] != PROTOBUF_C_TYPE_UINT32 || json_integer_value(v) >= 0) &&
                (want[w] != PROTOBUF_C_TYPE_UINT64 || json_integer_value(v) >= 0)) {
                pbjson_set(m, &d->fields[i], v, a);
                return;
            }
}

ProtobufCMessage *pbjson_message(const ProtobufCMessageDescriptor *d, json_t *j,
                                 struct pbjson_arena *a)
{
    ProtobufCMessage *m = pbjson_alloc(a, d->sizeof_message);
    if (!m)
        return NULL;
    protobuf_c_message_init(d, m);
    if (json_is_object(j)) {
        for (unsigned i = 0; i < d->n_fields; i++) {
            json_t *v = json_object_get(j, d->fields[i].name);
            if (v && !json_is_null(v))
                pbjson_set(m, &d->fields[i], v, a);
        }
    } else if (j && pbjson_oneof_only(d)) {
        pbjson_scalar_oneof(m, d, j, a);
    }
    return m;
}

json_t *pbjson_oneof_value(const ProtobufCMessage *m)
{
    const ProtobufCMessageDescriptor *d = m->descriptor;
    for (unsigned i = 0; i < d->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        if (!(f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) ||
            *(const uint32_t *)((const char *)m + f->quantifier_offset) != f->id)
            continue;
        const char *p = (const char *)m + f->offset;
        switch (f->type) {
        case PROTOBUF_C_TYPE_BOOL: return json_boolean(*(const protobuf_c_boolean *)p);
        case PROTOBUF_C_TYPE_INT32:
        case PROTOBUF_C_TYPE_SINT32:
        case PROTOBUF_C_TYPE_SFIXED32: return json_integer(*(const int32_t *)p);
        case PROTOBUF_C_TYPE_UINT32:
        case PROTOBUF_C_TYPE_FIXED32: return json_integer(*(const uint32_t *)p);
        case PROTOBUF_C_TYPE_INT64:
        case PROTOBUF_C_TYPE_SINT64:
        case PROTOBUF_C_TYPE_SFIXED64: return json_integer(*(const int64_t *)p);
        case PROTOBUF_C_TYPE_UINT64:
        case PROTOBUF_C_TYPE_FIXED64: {
            uint64_t u = *(const uint64_t *)p;
            return u > INT64_MAX ? json_real((double)u) : json_integer((json_int_t)u);
        }
        case PROTOBUF_C_TYPE_FLOAT: return json_real(*(const float *)p);
        case PROTOBUF_C_TYPE_DOUBLE: return json_real(*(const double *)p);
        case PROTOBUF_C_TYPE_STRING: {
            const char *s = *(char *const *)p;
            return json_string(s ? s : "");
        }
        default: return NULL;
        }
    }
    return NULL;
}
